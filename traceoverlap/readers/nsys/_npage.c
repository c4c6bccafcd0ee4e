/* _npage: the hot loops of the Nsight Systems reader's SQLite page decoder (_pages.py) in C.
 *
 * _pages.py decodes a table's b-tree leaf pages with numpy: a dozen vectorised passes per block
 * of rows (cell pointers, three varints per cell, the record header's serial types, the running
 * sum of the value sizes, one gather per integer column, one index per text byte). This module
 * does the same for one row at a time in one pass, and writes straight into the caller's
 * output columns. It is an accelerator, never the definition: _pages.py's numpy decoder is the
 * fallback (no compiler at install, or TRACEOVERLAP_NPAGE=0), and every value, every decision to
 * give up on the pages (then the table is read through SQLite), is the one that decoder makes
 * (tests/test_npage.py checks both against each other on random pages and records).
 *
 * decode(mm, page_size, usable, leaves, ncell, pick, ncol, rowid, held, ints, texts) -> None|str
 *   mm          the database file (any contiguous bytes buffer)
 *   leaves      int64: leaf page numbers of this block, in key order; ncell int64: their cells
 *   pick        None (every cell of the block) or int64: sorted positions among them to decode
 *   ncol        serial types read per record (the last column wanted + 1)
 *   rowid       None or int64 out: each row's rowid
 *   held        int64 out: how many of the ncol columns each record holds
 *   ints        sequence of (column, values int64 out, kinds int8 out): integer columns
 *   texts       sequence of (column, serial int64 out, offset int64 out): text columns
 *   -> None when decoded, or the reason (a str) the pages cannot be trusted.
 *
 * texts(mm, offsets, lengths, null) -> (codes, uniques, bad): a block of texts as codes into
 *   the distinct ones, each decoded once (see below): the NVTX text column of an export repeats
 *   a few thousand names over hundreds of thousands of rows.
 *
 * texts_memo(mm, offsets, lengths, null, memo, needles=None) -> (codes, uniques, bad, known,
 *   found): texts(), the distinct texts looked up first in a Memo (or None: kept across the
 *   blocks of one scan): one found there is not decoded again (its str is shared) and brings the
 *   text filter's verdict given in an earlier block. known: bytes of int8, per unique: 0 / 1 the
 *   verdict kept, 2 none kept yet (the caller asks the filter, then hands the answers, in order,
 *   to memo.settle); found: how many uniques the memo held. A new text is kept while the memo
 *   has room. needles: None, or a tuple of lowercase ASCII bytes (the filter's
 *   namefilter.NameTest.needles): a new ASCII text whose lowered bytes hold none is refused
 *   undecoded (None in uniques, known 0).
 *
 * containing(mm, serial, offset, needle) -> bytes: per row (uint8) 1 where its value is a text
 *   (an odd serial type >= 13, as decode gives serial and offset) whose bytes before the first
 *   NUL hold needle (ASCII letters, lowercase) with ASCII letters of either case: what SQLite's
 *   `column LIKE '%needle%'` selects of a text; 0 for anything else (whether LIKE matches a blob
 *   depends on how SQLite was built: the caller leaves blobs, and numbers, to SQLite).
 *
 * Memo(limit): at most limit texts (bytes, str, verdict, whether valid UTF-8); len(memo) is
 *   how many it holds; memo.settle(verdicts) records the verdicts (bytes-like, one byte each,
 *   nonzero: kept) of the last texts_memo call's uniques of known 2, in their order.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* what _pages.py reads per serial type 0..12 (12: every text / blob): the kind (0 integer,
 * 1 NULL, 2 other), the byte size of the value (types 0-11) */
static const int8_t KIND[13] = {1, 0, 0, 0, 0, 0, 0, 2, 0, 0, 2, 2, 2};
static const int64_t FIXED_SIZE[12] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0};
/* serial types above this are refused (as _pages.py does): no value that large fits a page,
 * and the running sum of the sizes cannot overflow */
#define MAX_SERIAL ((int64_t)1 << 40)

typedef struct {
    const uint8_t *p;
    int64_t size;
} Map;

/* a hint to bring the bytes at an address into the cache (never a read: no fault, any address;
 * NULL: none): the rows of a block are read from the mapped file, rarely in cache, at addresses
 * known a few rows ahead */
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH_AHEAD(addr)                                 \
    do {                                                     \
        const void *prefetch_at_ = (const void *)(addr);     \
        if (prefetch_at_) __builtin_prefetch(prefetch_at_);  \
    } while (0)
#else
#define PREFETCH_AHEAD(addr) ((void)0)
#endif

/* the varint at pos: its value (two's complement of the 64-bit pattern, as numpy assembles it)
 * and length; 0 when it would read outside the file (the checks _pages.varint makes) */
static inline int varint(const Map *m, int64_t pos, int64_t *value, int64_t *len) {
    if (pos < 0 || pos >= m->size) return 0;
    const uint8_t *p = m->p + pos;
    if (p[0] < 0x80) {
        *value = p[0];
        *len = 1;
        return 1;
    }
    if (pos + 9 > m->size) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = (v << 7) | (uint64_t)(p[i] & 0x7F);
        if (p[i] < 0x80) {
            *value = (int64_t)v;
            *len = i + 1;
            return 1;
        }
    }
    v = (v << 8) | (uint64_t)p[8];
    *value = (int64_t)v;
    *len = 9;
    return 1;
}

static inline int64_t value_size(int64_t st) {
    return st < 12 ? FIXED_SIZE[st] : (st - 12) >> 1;
}

typedef struct {
    Py_ssize_t column;
    Py_buffer a, b; /* ints: values, kinds; texts: serial, offset */
} Out;

static int get_buf(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize,
                   Py_ssize_t n, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)))
        return -1;
    if (view->itemsize != itemsize || (n >= 0 && view->len != n * itemsize)) {
        PyErr_Format(PyExc_ValueError, "%s: %zd-byte items of %zd rows expected", what, itemsize,
                     n);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

static void release(Py_buffer *v) {
    if (v->obj) PyBuffer_Release(v);
    v->obj = NULL;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    PyObject *mm_o, *leaves_o, *ncell_o, *pick_o, *rowid_o, *held_o, *ints_o, *texts_o;
    Py_ssize_t page_size, usable, ncol;
    if (!PyArg_ParseTuple(args, "OnnOOOnOOOO", &mm_o, &page_size, &usable, &leaves_o, &ncell_o,
                          &pick_o, &ncol, &rowid_o, &held_o, &ints_o, &texts_o))
        return NULL;
    if (page_size < 512 || usable < 1 || usable > page_size || ncol < 0) {
        PyErr_SetString(PyExc_ValueError, "bad page size, usable size or column count");
        return NULL;
    }
    Py_buffer mmv = {0}, leavesv = {0}, ncellv = {0}, pickv = {0}, rowidv = {0}, heldv = {0};
    Out *outs = NULL;
    Py_ssize_t n_ints = 0, n_texts = 0, n_outs = 0;
    int64_t *cells = NULL, *st = NULL, *off = NULL;
    PyObject *result = NULL;
    const char *reason = NULL;

    if (PyObject_GetBuffer(mm_o, &mmv, PyBUF_C_CONTIGUOUS)) goto done;
    if (get_buf(leaves_o, &leavesv, 0, 8, -1, "leaves")) goto done;
    Py_ssize_t npages = leavesv.len / 8;
    if (get_buf(ncell_o, &ncellv, 0, 8, npages, "ncell")) goto done;
    const int64_t *leaves = (const int64_t *)leavesv.buf, *ncell = (const int64_t *)ncellv.buf;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < npages; i++) {
        if (ncell[i] < 0 || ncell[i] > 65535) {
            PyErr_SetString(PyExc_ValueError, "ncell: a page's cell count out of range");
            goto done;
        }
        total += ncell[i];
    }
    Py_ssize_t m = (Py_ssize_t)total;
    const int64_t *pick = NULL;
    if (pick_o != Py_None) {
        if (get_buf(pick_o, &pickv, 0, 8, -1, "pick")) goto done;
        pick = (const int64_t *)pickv.buf;
        m = pickv.len / 8;
        for (Py_ssize_t i = 0; i < m; i++) {
            if (pick[i] < 0 || pick[i] >= total || (i && pick[i] <= pick[i - 1])) {
                PyErr_SetString(PyExc_ValueError, "pick: rows not sorted or outside the block");
                goto done;
            }
        }
    }
    if (rowid_o != Py_None && get_buf(rowid_o, &rowidv, 1, 8, m, "rowid")) goto done;
    if (get_buf(held_o, &heldv, 1, 8, m, "held")) goto done;

    PyObject *ints_f = PySequence_Fast(ints_o, "ints: a sequence");
    if (!ints_f) goto done;
    PyObject *texts_f = PySequence_Fast(texts_o, "texts: a sequence");
    if (!texts_f) {
        Py_DECREF(ints_f);
        goto done;
    }
    n_ints = PySequence_Fast_GET_SIZE(ints_f);
    n_texts = PySequence_Fast_GET_SIZE(texts_f);
    outs = (Out *)calloc((size_t)(n_ints + n_texts) + 1, sizeof(Out));
    if (!outs) {
        Py_DECREF(ints_f);
        Py_DECREF(texts_f);
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n_ints + n_texts; k++) {
        int is_int = k < n_ints;
        PyObject *item = is_int ? PySequence_Fast_GET_ITEM(ints_f, k)
                                : PySequence_Fast_GET_ITEM(texts_f, k - n_ints);
        PyObject *a, *b;
        Out *o = &outs[k];
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            PyErr_SetString(PyExc_TypeError, "(column, out, out) tuples expected");
            goto fail_seq;
        }
        o->column = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 0));
        if (o->column == -1 && PyErr_Occurred()) goto fail_seq;
        if (o->column < 0 || o->column >= ncol) {
            PyErr_SetString(PyExc_ValueError, "a column outside the serial types read");
            goto fail_seq;
        }
        a = PyTuple_GET_ITEM(item, 1);
        b = PyTuple_GET_ITEM(item, 2);
        n_outs = k + 1;
        if (get_buf(a, &o->a, 1, 8, m, is_int ? "values" : "serial")) goto fail_seq;
        if (get_buf(b, &o->b, 1, is_int ? 1 : 8, m, is_int ? "kinds" : "offset")) goto fail_seq;
    }
    Py_DECREF(ints_f);
    Py_DECREF(texts_f);
    goto parsed;
fail_seq:
    Py_DECREF(ints_f);
    Py_DECREF(texts_f);
    goto done;
parsed:;

    cells = (int64_t *)malloc(sizeof(int64_t) * ((size_t)total + 1) * 2);
    st = (int64_t *)malloc(sizeof(int64_t) * ((size_t)ncol + 1));
    off = (int64_t *)malloc(sizeof(int64_t) * ((size_t)ncol + 1));
    if (!cells || !st || !off) {
        PyErr_NoMemory();
        goto done;
    }
    Map map = {(const uint8_t *)mmv.buf, (int64_t)mmv.len};
    int64_t *limits = cells + total;
    int64_t *rowid_out = rowidv.obj ? (int64_t *)rowidv.buf : NULL;
    int64_t *held_out = (int64_t *)heldv.buf;

    Py_BEGIN_ALLOW_THREADS
    /* every cell of the block (as _pages.cells: all of them checked, picked or not) */
    int64_t r = 0;
    for (Py_ssize_t i = 0; i < npages && !reason; i++) {
        int64_t page = leaves[i];
        /* the next page's header and first cell pointers */
        if (i + 1 < npages && leaves[i + 1] >= 1 && leaves[i + 1] <= map.size / page_size)
            PREFETCH_AHEAD(map.p + (leaves[i + 1] - 1) * page_size);
        if (page < 1 || page > map.size / page_size) {
            reason = "page number out of range";
            break;
        }
        int64_t base = (page - 1) * page_size;
        int64_t hdr = base + (page == 1 ? 100 : 0);
        int64_t limit = base + usable;
        int64_t first = hdr + 8 + 2 * ncell[i];
        if (first > limit) {
            reason = "cell pointer array outside the page";
            break;
        }
        for (int64_t k = 0; k < ncell[i]; k++, r++) {
            const uint8_t *q = map.p + hdr + 8 + 2 * k;
            int64_t c = base + ((int64_t)q[0] << 8 | q[1]);
            if (c < first || c >= limit) {
                reason = "cell outside the page";
                break;
            }
            cells[r] = c;
            limits[r] = limit;
        }
    }
    for (Py_ssize_t i = 0; i < m && !reason; i++) {
        int64_t at = pick ? pick[i] : (int64_t)i;
        int64_t cell = cells[at], limit = limits[at];
        PREFETCH_AHEAD(i + 8 < m ? map.p + cells[pick ? pick[i + 8] : i + 8] : NULL);
        int64_t payload, l1, rowid, l2, hsize, l3;
        if (!varint(&map, cell, &payload, &l1)) {
            reason = "varint past the end of the file";
            break;
        }
        if (payload > usable - 35) {
            reason = "overflow pages";
            break;
        }
        if (!varint(&map, cell + l1, &rowid, &l2)) {
            reason = "varint past the end of the file";
            break;
        }
        int64_t rec = cell + l1 + l2;
        int64_t record_end = rec + payload;
        if (record_end > limit) {
            reason = "record outside the page";
            break;
        }
        if (!varint(&map, rec, &hsize, &l3)) {
            reason = "varint past the end of the file";
            break;
        }
        if (hsize < l3 || hsize > payload) {
            reason = "bad record header";
            break;
        }
        int64_t header_end = rec + hsize;
        /* serial types of the first ncol columns; 0 past the header's end */
        int64_t p = rec + l3, held = 0;
        for (Py_ssize_t j = 0; j < ncol; j++) {
            if (p < header_end) {
                int64_t ln;
                if (!varint(&map, p, &st[j], &ln)) {
                    reason = "varint past the end of the file";
                    break;
                }
                p += ln;
                held++;
                if (st[j] < 0 || st[j] > MAX_SERIAL) {
                    reason = "serial type out of range";
                    break;
                }
            } else {
                st[j] = 0;
            }
        }
        if (reason) break;
        if (p > header_end) {
            reason = "record header longer than declared";
            break;
        }
        /* where each value starts: the header's end plus the sizes of the columns before it */
        int64_t body = header_end;
        for (Py_ssize_t j = 0; j < ncol; j++) {
            off[j] = body;
            body += value_size(st[j]);
        }
        if (body > record_end) {
            reason = "record longer than its cell";
            break;
        }
        held_out[i] = held;
        if (rowid_out) rowid_out[i] = rowid;
        for (Py_ssize_t k = 0; k < n_ints; k++) {
            Out *o = &outs[k];
            int64_t t = st[o->column], v = 0;
            int8_t kind = KIND[t < 12 ? t : 12];
            if (t >= 1 && t <= 6) {
                /* a big-endian two's complement integer of 1-8 bytes, inside the record */
                int64_t n = FIXED_SIZE[t];
                const uint8_t *q = map.p + off[o->column];
                uint64_t u = 0;
                for (int64_t b = 0; b < n; b++) u = (u << 8) | q[b];
                if (n < 8 && (q[0] & 0x80)) u |= ~(uint64_t)0 << (8 * n);
                v = (int64_t)u;
            } else if (t == 9) {
                v = 1;
            }
            ((int64_t *)o->a.buf)[i] = v;
            ((int8_t *)o->b.buf)[i] = kind;
        }
        for (Py_ssize_t k = n_ints; k < n_ints + n_texts; k++) {
            Out *o = &outs[k];
            ((int64_t *)o->a.buf)[i] = st[o->column];
            ((int64_t *)o->b.buf)[i] = off[o->column];
        }
    }
    Py_END_ALLOW_THREADS

    if (reason) {
        result = PyUnicode_FromString(reason);
    } else {
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    free(cells);
    free(st);
    free(off);
    if (outs) {
        for (Py_ssize_t k = 0; k < n_outs; k++) {
            release(&outs[k].a);
            release(&outs[k].b);
        }
        free(outs);
    }
    release(&mmv);
    release(&leavesv);
    release(&ncellv);
    release(&pickv);
    release(&rowidv);
    release(&heldv);
    return result;
}

/* texts(mm, offsets, lengths, null) -> (codes, uniques, bad): the texts of a block of rows,
 * each distinct byte string decoded once. codes: bytes of int32, per row the index of its text in
 * uniques (a list of str, decoded as UTF-8, U+FFFD replacing what is not), -1 where null (uint8
 * per row) is set; bad: how many rows hold a text that is not valid UTF-8. */
static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* a hash of p[0:n], 8 bytes at a time (a byte at a time, FNV-1a, was most of the time spent on
 * a column of 35-byte names): a multiply-rotate round per word (xxHash64's), the last 0-7 bytes
 * as one more word, MurmurHash3's finaliser; only ever compared within this process */
static inline uint64_t span_hash(const uint8_t *p, int64_t n) {
    const uint64_t P1 = 0x9E3779B185EBCA87ULL, P2 = 0xC2B2AE3D27D4EB4FULL;
    uint64_t h = 0x27D4EB2F165667C5ULL ^ ((uint64_t)n * P1);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = rotl64(h ^ (w * P2), 31) * P1;
    }
    if (i < n) {
        uint64_t w = 0;
        for (int64_t k = n - 1; k >= i; k--) w = (w << 8) | p[k];
        h = rotl64(h ^ (w * P2), 31) * P1;
    }
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 33);
}

/* Memo: texts of earlier blocks of a scan, by their bytes (an open-addressing table of at most
 * limit entries, twice as many slots: never full, never resized) */
typedef struct {
    PyObject_HEAD
    Py_ssize_t limit, n;
    size_t cap;
    int32_t *slots;
    uint64_t *hash;
    int64_t *at, *len; /* the entry's bytes in arena */
    PyObject **str;
    int8_t *verdict; /* 0 / 1; 2: none yet */
    uint8_t *bad;
    char *arena;
    size_t arena_len, arena_cap;
    int32_t *pending; /* the last texts_memo call's uniques of known 2: their entry, or -1 */
    Py_ssize_t n_pending;
} Memo;

static void memo_dealloc(Memo *m) {
    if (m->str)
        for (Py_ssize_t e = 0; e < m->n; e++) Py_XDECREF(m->str[e]);
    free(m->slots);
    free(m->hash);
    free(m->at);
    free(m->len);
    free(m->str);
    free(m->verdict);
    free(m->bad);
    free(m->arena);
    free(m->pending);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyObject *memo_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Py_ssize_t limit;
    static char *kwlist[] = {"limit", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n", kwlist, &limit)) return NULL;
    if (limit < 0 || limit > (1 << 24)) {
        PyErr_SetString(PyExc_ValueError, "limit: 0 to 2**24 texts");
        return NULL;
    }
    Memo *m = (Memo *)type->tp_alloc(type, 0);
    if (!m) return NULL;
    m->limit = limit;
    m->cap = 16;
    while (m->cap < (size_t)limit * 2) m->cap <<= 1;
    size_t k = (size_t)limit + 1;
    m->slots = (int32_t *)malloc(m->cap * sizeof(int32_t));
    m->hash = (uint64_t *)malloc(k * sizeof(uint64_t));
    m->at = (int64_t *)malloc(k * sizeof(int64_t));
    m->len = (int64_t *)malloc(k * sizeof(int64_t));
    m->str = (PyObject **)calloc(k, sizeof(PyObject *));
    m->verdict = (int8_t *)malloc(k);
    m->bad = (uint8_t *)malloc(k);
    if (!m->slots || !m->hash || !m->at || !m->len || !m->str || !m->verdict || !m->bad) {
        Py_DECREF(m);
        return PyErr_NoMemory();
    }
    memset(m->slots, 0xFF, m->cap * sizeof(int32_t));
    return (PyObject *)m;
}

static Py_ssize_t memo_length(Memo *m) { return m->n; }

static PyObject *memo_settle(Memo *m, PyObject *arg) {
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_C_CONTIGUOUS)) return NULL;
    if (v.itemsize != 1 || v.len != m->n_pending) {
        PyBuffer_Release(&v);
        PyErr_SetString(PyExc_ValueError, "settle: one byte per text of known 2 expected");
        return NULL;
    }
    const uint8_t *b = (const uint8_t *)v.buf;
    for (Py_ssize_t i = 0; i < m->n_pending; i++)
        if (m->pending[i] >= 0) m->verdict[m->pending[i]] = b[i] ? 1 : 0;
    m->n_pending = 0;
    PyBuffer_Release(&v);
    Py_RETURN_NONE;
}

/* the entry holding bytes p[0:k] of hash h, or -1; *slot: where it is or would go */
static int32_t memo_find(const Memo *m, const uint8_t *p, int64_t k, uint64_t h, size_t *slot) {
    size_t s = (size_t)h & (m->cap - 1);
    for (;;) {
        int32_t e = m->slots[s];
        if (e < 0 || (m->hash[e] == h && m->len[e] == k &&
                      (k == 0 || memcmp(m->arena + m->at[e], p, (size_t)k) == 0))) {
            *slot = s;
            return e;
        }
        s = (s + 1) & (m->cap - 1);
    }
}

/* a new entry (the memo has room): its bytes copied; -1 when out of memory (error set) */
static int32_t memo_add(Memo *m, const uint8_t *p, int64_t k, uint64_t h, size_t slot,
                        PyObject *str, uint8_t bad) {
    if (m->arena_len + (size_t)k > m->arena_cap) {
        size_t cap = m->arena_cap ? m->arena_cap : 1 << 16;
        while (cap < m->arena_len + (size_t)k) cap <<= 1;
        char *a = (char *)realloc(m->arena, cap);
        if (!a) {
            PyErr_NoMemory();
            return -1;
        }
        m->arena = a;
        m->arena_cap = cap;
    }
    int32_t e = (int32_t)m->n++;
    if (k) memcpy(m->arena + m->arena_len, p, (size_t)k);
    m->at[e] = (int64_t)m->arena_len;
    m->arena_len += (size_t)k;
    m->len[e] = k;
    m->hash[e] = h;
    Py_INCREF(str);
    m->str[e] = str;
    m->verdict[e] = 2;
    m->bad[e] = bad;
    m->slots[slot] = e;
    return e;
}

static PyMethodDef MEMO_METHODS[] = {
    {"settle", (PyCFunction)memo_settle, METH_O,
     "settle(verdicts): the verdicts of the last texts_memo call's texts of known 2, in order."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods MEMO_SEQ = {.sq_length = (lenfunc)memo_length};

static PyTypeObject MemoType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_npage.Memo",
    .tp_basicsize = sizeof(Memo),
    .tp_dealloc = (destructor)memo_dealloc,
    .tp_as_sequence = &MEMO_SEQ,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memo(limit): the distinct texts of a scan's earlier blocks (see texts_memo).",
    .tp_methods = MEMO_METHODS,
    .tp_new = memo_new,
};

/* Needles: lowercase ASCII strings one of which the lowered text of every name the text filter
 * keeps contains (namefilter.NameTest.needles). An ASCII text that holds none is refused without
 * being decoded or asked. Found through a table of each needle's first two bytes (one lookup per
 * byte of the text) and one of the one-byte needles. */
typedef struct {
    Py_ssize_t n;
    const uint8_t **p;
    Py_ssize_t *len;
    int16_t *pair_head; /* 65536: first needle (of 2+ bytes) starting with the pair, or -1 */
    int16_t *next;      /* the next needle with the same first pair, or -1 */
    uint8_t single[256];
    int empty;          /* an empty needle: every text holds it */
} Needles;

static void needles_free(Needles *nd) {
    free(nd->p);
    free(nd->len);
    free(nd->pair_head);
    free(nd->next);
}

/* 0, or -1 with an error set; nd->n = -1: no needles (None) */
static int needles_parse(PyObject *seq, Needles *nd) {
    memset(nd, 0, sizeof(*nd));
    nd->n = -1;
    if (seq == NULL || seq == Py_None) return 0;
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) > 30000) {
        PyErr_SetString(PyExc_TypeError, "needles: a tuple of bytes (at most 30000)");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    nd->p = (const uint8_t **)malloc(((size_t)n + 1) * sizeof(uint8_t *));
    nd->len = (Py_ssize_t *)malloc(((size_t)n + 1) * sizeof(Py_ssize_t));
    nd->pair_head = (int16_t *)malloc(65536 * sizeof(int16_t));
    nd->next = (int16_t *)malloc(((size_t)n + 1) * sizeof(int16_t));
    if (!nd->p || !nd->len || !nd->pair_head || !nd->next) {
        needles_free(nd);
        PyErr_NoMemory();
        return -1;
    }
    memset(nd->pair_head, 0xFF, 65536 * sizeof(int16_t));
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *b = PyTuple_GET_ITEM(seq, j);
        if (!PyBytes_Check(b)) {
            needles_free(nd);
            PyErr_SetString(PyExc_TypeError, "needles: a tuple of bytes");
            return -1;
        }
        const uint8_t *q = (const uint8_t *)PyBytes_AS_STRING(b);
        Py_ssize_t k = PyBytes_GET_SIZE(b);
        nd->p[j] = q;
        nd->len[j] = k;
        nd->next[j] = -1;
        if (k == 0) {
            nd->empty = 1;
        } else if (k == 1) {
            nd->single[q[0]] = 1;
        } else {
            int pair = q[0] << 8 | q[1];
            nd->next[j] = nd->pair_head[pair];
            nd->pair_head[pair] = (int16_t)j;
        }
    }
    nd->n = n;
    return 0;
}

static inline uint8_t lower_ascii(uint8_t c) { return (c >= 'A' && c <= 'Z') ? c | 0x20 : c; }

/* whether p[0:k] is ASCII and its lowered text holds none of the needles */
static int refused_by_needles(const Needles *nd, const uint8_t *p, int64_t k) {
    if (nd->empty) return 0;
    for (int64_t i = 0; i < k; i++)
        if (p[i] >= 0x80) return 0;
    for (int64_t i = 0; i < k; i++) {
        uint8_t c = lower_ascii(p[i]);
        if (nd->single[c]) return 0;
        if (i + 1 < k) {
            for (int16_t j = nd->pair_head[c << 8 | lower_ascii(p[i + 1])]; j >= 0;
                 j = nd->next[j]) {
                Py_ssize_t m = nd->len[j];
                if (m > k - i) continue;
                Py_ssize_t t = 2;
                while (t < m && lower_ascii(p[i + t]) == nd->p[j][t]) t++;
                if (t == m) return 0;
            }
        }
    }
    return 1;
}

static PyObject *texts_impl(PyObject *args, int with_memo) {
    PyObject *mm_o, *off_o, *len_o, *null_o, *memo_o = NULL, *needles_o = NULL;
    if (with_memo) {
        if (!PyArg_ParseTuple(args, "OOOOO|O", &mm_o, &off_o, &len_o, &null_o, &memo_o,
                              &needles_o))
            return NULL;
        if (memo_o == Py_None) {
            memo_o = NULL;
        } else if (!PyObject_TypeCheck(memo_o, &MemoType)) {
            PyErr_SetString(PyExc_TypeError, "memo: a Memo or None");
            return NULL;
        }
    } else if (!PyArg_ParseTuple(args, "OOOO", &mm_o, &off_o, &len_o, &null_o)) {
        return NULL;
    }
    Memo *memo = (Memo *)memo_o;
    Needles nd;
    if (needles_parse(needles_o, &nd)) return NULL;
    Py_buffer mmv = {0}, offv = {0}, lenv = {0}, nullv = {0};
    PyObject *result = NULL, *uniques = NULL, *codes_b = NULL, *known_b = NULL;
    int32_t *slots = NULL;
    int64_t *u_off = NULL, *u_len = NULL;
    uint8_t *u_bad = NULL;
    if (memo) memo->n_pending = 0;
    if (PyObject_GetBuffer(mm_o, &mmv, PyBUF_C_CONTIGUOUS)) goto done;
    if (get_buf(off_o, &offv, 0, 8, -1, "offsets")) goto done;
    Py_ssize_t n = offv.len / 8;
    if (get_buf(len_o, &lenv, 0, 8, n, "lengths")) goto done;
    if (get_buf(null_o, &nullv, 0, 1, n, "null")) goto done;
    if (n > INT32_MAX / 4) {
        PyErr_SetString(PyExc_ValueError, "too many texts in one block");
        goto done;
    }
    const int64_t *off = (const int64_t *)offv.buf, *len = (const int64_t *)lenv.buf;
    const uint8_t *null = (const uint8_t *)nullv.buf, *src = (const uint8_t *)mmv.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!null[i] && (len[i] < 0 || off[i] < 0 || off[i] > (int64_t)mmv.len ||
                         len[i] > (int64_t)mmv.len - off[i])) {
            PyErr_SetString(PyExc_ValueError, "a text outside the file");
            goto done;
        }
    }
    size_t cap = 16;
    while (cap < (size_t)n * 2) cap <<= 1;
    slots = (int32_t *)malloc(cap * sizeof(int32_t));
    u_off = (int64_t *)malloc(((size_t)n + 1) * sizeof(int64_t));
    u_len = (int64_t *)malloc(((size_t)n + 1) * sizeof(int64_t));
    u_bad = (uint8_t *)malloc((size_t)n + 1);
    if (!slots || !u_off || !u_len || !u_bad) {
        PyErr_NoMemory();
        goto done;
    }
    if (memo) {
        int32_t *pend = (int32_t *)realloc(memo->pending, ((size_t)n + 1) * sizeof(int32_t));
        if (!pend) {
            PyErr_NoMemory();
            goto done;
        }
        memo->pending = pend;
    }
    if (with_memo) {
        known_b = PyBytes_FromStringAndSize(NULL, n);
        if (!known_b) goto done;
    }
    memset(slots, 0xFF, cap * sizeof(int32_t));
    uniques = PyList_New(0);
    codes_b = PyBytes_FromStringAndSize(NULL, n * 4);
    if (!uniques || !codes_b) goto done;
    int32_t *codes = (int32_t *)PyBytes_AS_STRING(codes_b);
    int8_t *known = known_b ? (int8_t *)PyBytes_AS_STRING(known_b) : NULL;
    Py_ssize_t bad = 0, found = 0;
    int32_t nu = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (null[i]) {
            codes[i] = -1;
            continue;
        }
        const uint8_t *p = src + off[i];
        int64_t k = len[i];
        /* the text a few rows on: its bytes are read from the mapped file, rarely in cache */
        if (i + 8 < n && !null[i + 8]) PREFETCH_AHEAD(src + off[i + 8]);
        uint64_t hash = span_hash(p, k);
        size_t h = (size_t)hash & (cap - 1);
        int32_t u;
        for (;;) {
            u = slots[h];
            if (u < 0 || (u_len[u] == k && memcmp(src + u_off[u], p, (size_t)k) == 0)) break;
            h = (h + 1) & (cap - 1);
        }
        if (u < 0) {
            u = nu++;
            slots[h] = u;
            u_off[u] = off[i];
            u_len[u] = k;
            PyObject *t = NULL;
            int32_t e = -1;
            size_t mslot = 0;
            if (memo) {
                e = memo_find(memo, p, k, hash, &mslot);
                if (e >= 0) {
                    t = memo->str[e];
                    Py_INCREF(t);
                    u_bad[u] = memo->bad[e];
                    known[u] = memo->verdict[e];
                    found++;
                }
            }
            if (!t && nd.n >= 0 && refused_by_needles(&nd, p, k)) {
                /* refused without a str: None in uniques, verdict 0 */
                t = Py_None;
                Py_INCREF(t);
                u_bad[u] = 0;
                known[u] = 0;
                if (memo && memo->n < memo->limit) {
                    e = memo_add(memo, p, k, hash, mslot, t, 0);
                    if (e < 0) {
                        Py_DECREF(t);
                        goto done;
                    }
                    memo->verdict[e] = 0;
                }
            }
            if (!t) {
                t = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)k, NULL);
                u_bad[u] = 0;
                if (!t && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                    PyErr_Clear();
                    t = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)k, "replace");
                    u_bad[u] = 1;
                }
                if (!t) goto done;
                if (known) known[u] = 2;
                if (memo) {
                    if (memo->n < memo->limit) {
                        e = memo_add(memo, p, k, hash, mslot, t, u_bad[u]);
                        if (e < 0) {
                            Py_DECREF(t);
                            goto done;
                        }
                    }
                }
            }
            if (memo && known[u] == 2) memo->pending[memo->n_pending++] = e;
            int rc = PyList_Append(uniques, t);
            Py_DECREF(t);
            if (rc) goto done;
        }
        codes[i] = u;
        bad += u_bad[u];
    }
    if (with_memo) {
        if (_PyBytes_Resize(&known_b, nu)) goto done;
        result = Py_BuildValue("OOnOn", codes_b, uniques, bad, known_b, found);
    } else {
        result = Py_BuildValue("OOn", codes_b, uniques, bad);
    }
done:
    if (!result && memo) memo->n_pending = 0;
    if (nd.n >= 0) needles_free(&nd);
    free(slots);
    free(u_off);
    free(u_len);
    free(u_bad);
    Py_XDECREF(uniques);
    Py_XDECREF(codes_b);
    Py_XDECREF(known_b);
    release(&mmv);
    release(&offv);
    release(&lenv);
    release(&nullv);
    return result;
}

static PyObject *texts(PyObject *self, PyObject *args) { return texts_impl(args, 0); }

static PyObject *texts_memo(PyObject *self, PyObject *args) { return texts_impl(args, 1); }

/* containing(mm, serial, offset, needle) -> bytes: see the header. The needle's bytes are
 * lowercase ASCII letters (checked): a byte b matches needle byte c when (b | 0x20) == c, which
 * for a letter c holds for exactly its two cases, as SQLite's LIKE folds them. */
static PyObject *containing(PyObject *self, PyObject *args) {
    PyObject *mm_o, *st_o, *off_o;
    const char *needle;
    Py_ssize_t nlen;
    if (!PyArg_ParseTuple(args, "OOOy#", &mm_o, &st_o, &off_o, &needle, &nlen)) return NULL;
    if (nlen < 1) {
        PyErr_SetString(PyExc_ValueError, "needle: at least one byte");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < nlen; k++) {
        if (needle[k] < 'a' || needle[k] > 'z') {
            PyErr_SetString(PyExc_ValueError, "needle: lowercase ASCII letters only");
            return NULL;
        }
    }
    Py_buffer mmv = {0}, stv = {0}, offv = {0};
    PyObject *result = NULL;
    if (PyObject_GetBuffer(mm_o, &mmv, PyBUF_C_CONTIGUOUS)) goto done;
    if (get_buf(st_o, &stv, 0, 8, -1, "serial")) goto done;
    Py_ssize_t n = stv.len / 8;
    if (get_buf(off_o, &offv, 0, 8, n, "offset")) goto done;
    const int64_t *st = (const int64_t *)stv.buf, *off = (const int64_t *)offv.buf;
    const uint8_t *mp = (const uint8_t *)mmv.buf;
    int64_t size = (int64_t)mmv.len;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (st[i] >= 12) {
            int64_t len = value_size(st[i]);
            if (st[i] > MAX_SERIAL || off[i] < 0 || off[i] > size - len) {
                PyErr_SetString(PyExc_ValueError, "a value outside the file");
                goto done;
            }
        }
    }
    result = PyBytes_FromStringAndSize(NULL, n);
    if (!result) goto done;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
    /* a match is found at its last byte (the key: the rarest of "ank"), 8 bytes at a time: a
     * word with no NUL and no key byte in either case is skipped whole (no match ends in it,
     * and LIKE's text does not end in it), the others are looked at byte by byte */
    const Py_ssize_t kk = nlen - 1;
    const uint8_t key = (uint8_t)needle[kk];
    const uint64_t ONES = 0x0101010101010101ULL, HIGHS = 0x8080808080808080ULL;
    const uint64_t keys = ONES * key, lows = ONES * 0x20;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t hit = 0;
        if (st[i] >= 13 && (st[i] & 1)) {
            const uint8_t *p = mp + off[i];
            int64_t len = value_size(st[i]), a = 0;
            while (!hit && a < len) {
                for (; a + 8 <= len; a += 8) {
                    uint64_t w, x;
                    memcpy(&w, p + a, 8);
                    x = (w | lows) ^ keys;
                    if (((w - ONES) & ~w & HIGHS) | ((x - ONES) & ~x & HIGHS)) break;
                }
                int64_t stop = a + 8 < len ? a + 8 : len;
                for (; a < stop; a++) {
                    if (p[a] == 0) { /* LIKE sees the text up to its first NUL */
                        a = len;
                        break;
                    }
                    if ((p[a] | 0x20) != key || a < kk) continue;
                    Py_ssize_t k = 0;
                    while (k < kk && (p[a - kk + k] | 0x20) == (uint8_t)needle[k]) k++;
                    if (k == kk) {
                        hit = 1;
                        break;
                    }
                }
            }
        }
        out[i] = hit;
    }
    Py_END_ALLOW_THREADS
done:
    release(&mmv);
    release(&stv);
    release(&offv);
    return result;
}

static PyMethodDef METHODS[] = {
    {"decode", decode, METH_VARARGS,
     "decode(mm, page_size, usable, leaves, ncell, pick, ncol, rowid, held, ints, texts) -> "
     "None | str: a block of leaf pages into the output columns, or why it cannot be."},
    {"texts", texts, METH_VARARGS,
     "texts(mm, offsets, lengths, null) -> (codes, uniques, bad): a block's texts, each distinct "
     "one decoded once."},
    {"texts_memo", texts_memo, METH_VARARGS,
     "texts_memo(mm, offsets, lengths, null, memo) -> (codes, uniques, bad, known, found): "
     "texts(), the texts of the memo's earlier blocks not decoded again."},
    {"containing", containing, METH_VARARGS,
     "containing(mm, serial, offset, needle) -> bytes: per row 1 where its text holds needle "
     "(ASCII letters of either case) before its first NUL, as LIKE '%needle%' selects."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_npage", "The SQLite leaf-page decoder's hot loops (see _pages.py).",
    -1, METHODS, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__npage(void) {
    if (PyType_Ready(&MemoType) < 0) return NULL;
    PyObject *m = PyModule_Create(&MODULE);
    if (!m) return NULL;
    Py_INCREF(&MemoType);
    if (PyModule_AddObject(m, "Memo", (PyObject *)&MemoType) < 0) {
        Py_DECREF(&MemoType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
