/* _kscan: a JSON array of Kineto trace events -> the reader's columns, without a Python object
 * per event or per field.
 *
 * The msgspec path (_decode.py -> _columns.py) builds one struct per event and one Python object
 * per field, then turns them into numpy columns: ~60 % of the read's CPU on a large trace. This
 * scanner reads the same bytes once and writes the columns directly. It is an accelerator, never
 * the definition: for anything but the plain common case it either
 *
 *   - flags the event (its byte span is returned, and Python decodes that one event with the
 *     same typed msgspec decoder the slow path uses, then writes its row the same way): odd
 *     value types, keys written with escapes, duplicate keys, the collective args, ``args.name``;
 *   - or gives up on the whole chunk (returns None; the caller decodes it with msgspec as
 *     before): invalid JSON, invalid UTF-8 anywhere, nesting deeper than MAX_DEPTH, an event
 *     without a plain ``ph`` of a known phase, an escaped key at the event level.
 *
 * So every value it returns is the one the typed msgspec decode gives (tested against it on
 * every fixture, on the real traces and on random and mutated documents), and every input it
 * does not take the slow path still reads.
 *
 * Returned for the X events (rows, in document order), as bytes holding native arrays:
 *   cat, name      int32  local ids of the raw (undecoded) string contents, see ``strings``
 *   ts, dur        float64 (NaN when absent)
 *   pid, tid       int64  (-1 when absent; a string tid: the first number in it, see tid_field)
 *   correlation, device, stream                  int64 (-1 when absent)
 *   dims           int64 x 6 per row: args.grid then args.block (-1 when absent)
 *   input_dims     int32  local id of the raw ``args["Input Dims"]`` text, -1 when absent
 * and
 *   strings        list of bytes: the raw contents (between the quotes) of each local id
 *   texts          list of bytes: the raw ``Input Dims`` / ``Input type`` / ``Concrete Inputs``
 *                  texts of each local id
 *   python         bytes of int64 triples (row or -1, start, end): events Python decodes
 *                  itself (flagged X rows, and every M event), spans into the buffer
 *   input_type     int32  local id (in ``texts``) of the raw ``args["Input type"]`` text, -1
 *                  when absent: last, so that a reader of the first fifteen still works
 *   concrete       int32  local id (in ``texts``) of the raw ``args["Concrete Inputs"]`` text,
 *                  -1 when absent (the peer and tag of ``c10d::send`` / ``c10d::recv_``): after
 *                  it, so that a reader of the first sixteen still works
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

#define MAX_DEPTH 256
#define N_DIMS 6

/* ------------------------------------------------------------------------------------------ */
/* growable byte buffers */

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_grow(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *p = (char *)realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *v, size_t n) {
    if (buf_grow(b, n)) return -1;
    memcpy(b->p + b->len, v, n);
    b->len += n;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* interning raw byte spans of the input: span -> consecutive local id */

typedef struct {
    size_t off, len;
    uint64_t hash;
} Span;

typedef struct {
    uint32_t *slots; /* local id + 1; 0 = empty */
    size_t mask;
    Span *spans;
    size_t n, cap;
} Intern;

static uint64_t hash_bytes(const uint8_t *s, size_t n) {
    /* FNV-1a over 8-byte words, then a murmur finaliser: only a table key, never an output */
    uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

static int intern_rehash(Intern *t, size_t nslots) {
    uint32_t *slots = (uint32_t *)calloc(nslots, sizeof(uint32_t));
    if (!slots) return -1;
    size_t mask = nslots - 1;
    for (size_t i = 0; i < t->n; i++) {
        size_t j = (size_t)t->spans[i].hash & mask;
        while (slots[j]) j = (j + 1) & mask;
        slots[j] = (uint32_t)(i + 1);
    }
    free(t->slots);
    t->slots = slots;
    t->mask = mask;
    return 0;
}

/* the local id of base[off:off+len]; -1 on memory failure */
static int32_t intern(Intern *t, const uint8_t *base, size_t off, size_t len) {
    if (!t->slots && intern_rehash(t, 1024)) return -1;
    uint64_t h = hash_bytes(base + off, len);
    size_t j = (size_t)h & t->mask;
    uint32_t k;
    while ((k = t->slots[j])) {
        Span *s = &t->spans[k - 1];
        if (s->hash == h && s->len == len && memcmp(base + s->off, base + off, len) == 0)
            return (int32_t)(k - 1);
        j = (j + 1) & t->mask;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        Span *spans = (Span *)realloc(t->spans, cap * sizeof(Span));
        if (!spans) return -1;
        t->spans = spans;
        t->cap = cap;
    }
    if (t->n >= 0x7fffffff) return -1;
    t->spans[t->n] = (Span){off, len, h};
    t->slots[j] = (uint32_t)(t->n + 1);
    t->n++;
    if (2 * t->n > t->mask + 1 && intern_rehash(t, 2 * (t->mask + 1))) return -1;
    return (int32_t)(t->n - 1);
}

static void intern_free(Intern *t) {
    free(t->slots);
    free(t->spans);
}

/* ------------------------------------------------------------------------------------------ */
/* the parser */

enum { OK = 0, BAIL = 1, NOMEM = 2 };

typedef struct {
    const uint8_t *base, *p, *end;
    int depth;
} P;

/* character classes */
static uint8_t WS[256];      /* JSON white space */
static uint8_t SPECIAL[256]; /* ends the plain run of a string: '"', '\\', < 0x20, >= 0x80 */
static double POW10[23];

static void init_tables(void) {
    WS[' '] = WS['\t'] = WS['\n'] = WS['\r'] = 1;
    for (int c = 0; c < 256; c++) SPECIAL[c] = (c == '"' || c == '\\' || c < 0x20 || c >= 0x80);
    double v = 1.0;
    for (int i = 0; i < 23; i++) {
        POW10[i] = v;
        v *= 10.0;
    }
}

/* 0x80 in each byte of w that is zero, exactly (no false positives above a hit) */
static inline uint64_t zero_bytes(uint64_t w) {
    const uint64_t low7 = 0x7f7f7f7f7f7f7f7fULL;
    return ~(((w & low7) + low7) | w | low7);
}

static inline void skip_ws(P *ps) {
    const uint8_t *p = ps->p, *end = ps->end;
    if (p >= end || !WS[*p]) return; /* most often: nothing */
    if (end - p >= 2 && *p == ' ' && !WS[p[1]]) { /* the space after a ':' or a ',' */
        ps->p = p + 1;
        return;
    }
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* Kineto indents: a newline and a run of spaces before most keys, eight bytes at a time */
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        const uint64_t ones = 0x0101010101010101ULL;
        uint64_t other = ~(zero_bytes(w ^ (ones * ' ')) | zero_bytes(w ^ (ones * '\n'))) &
                         0x8080808080808080ULL;
        if (!other) {
            p += 8;
            continue;
        }
        p += __builtin_ctzll(other) >> 3;
        break;
    }
#endif
    while (p < end && WS[*p]) p++;
    ps->p = p;
}

/* One UTF-8 sequence starting at p (p[0] >= 0x80), as Python's strict decoder accepts it:
 * returns its length, 0 if invalid or cut by end. */
static int utf8_seq(const uint8_t *p, const uint8_t *end) {
    uint8_t c = p[0];
    if (c >= 0xC2 && c <= 0xDF) {
        if (end - p < 2 || (p[1] & 0xC0) != 0x80) return 0;
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (end - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0; /* overlong */
        if (c == 0xED && p[1] >= 0xA0) return 0; /* surrogates */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (end - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 ||
            (p[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0; /* overlong */
        if (c == 0xF4 && p[1] >= 0x90) return 0; /* beyond U+10FFFF */
        return 4;
    }
    return 0;
}

static inline int is_hex(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* the value of four hex digits (checked with is_hex) */
static inline unsigned hex4(const uint8_t *p) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];
        v = v * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SWAR 1
/* 0x80 in each byte of w that is '"', '\\', < 0x20 or >= 0x80 (exact: no carry crosses a byte) */
static inline uint64_t special_bytes(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    const uint64_t low7 = 0x7f7f7f7f7f7f7f7fULL;
    uint64_t below = ~(((w & low7) + ones * (0x80 - 0x20)) | w) & highs;
    return zero_bytes(w ^ (ones * '"')) | zero_bytes(w ^ (ones * '\\')) | below | (w & highs);
}
#endif

/* A string at ps->p (the opening quote). Sets the content span [*s, *e) and whether it holds
 * an escape. BAIL on anything JSON or strict UTF-8 refuses. */
static int parse_string(P *ps, const uint8_t **s, const uint8_t **e, int *escaped) {
    const uint8_t *p = ps->p + 1, *end = ps->end;
    *s = p;
    *escaped = 0;
    for (;;) {
#ifdef SWAR
        /* eight bytes at a time, to the first that is '"', '\\', < 0x20 or >= 0x80 */
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t hit = special_bytes(w);
            if (hit) {
                p += __builtin_ctzll(hit) >> 3;
                break;
            }
            p += 8;
        }
#endif
        while (p < end && !SPECIAL[*p]) p++;
        if (p >= end) return BAIL;
        uint8_t c = *p;
        if (c == '"') {
            *e = p;
            ps->p = p + 1;
            return OK;
        }
        if (c == '\\') {
            *escaped = 1;
            if (end - p < 2) return BAIL;
            uint8_t x = p[1];
            if (x == 'u') {
                if (end - p < 6 || !is_hex(p[2]) || !is_hex(p[3]) || !is_hex(p[4]) ||
                    !is_hex(p[5]))
                    return BAIL;
                unsigned u = hex4(p + 2);
                p += 6;
                if (u >= 0xDC00 && u <= 0xDFFF) return BAIL; /* a lone low surrogate */
                if (u >= 0xD800 && u <= 0xDBFF) {
                    /* a high surrogate: msgspec refuses it unless a low one follows at once,
                     * in a string the scanner only skips too */
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || !is_hex(p[2]) ||
                        !is_hex(p[3]) || !is_hex(p[4]) || !is_hex(p[5]))
                        return BAIL;
                    u = hex4(p + 2);
                    if (u < 0xDC00 || u > 0xDFFF) return BAIL;
                    p += 6;
                }
            } else if (x == '"' || x == '\\' || x == '/' || x == 'b' || x == 'f' || x == 'n' ||
                       x == 'r' || x == 't') {
                p += 2;
            } else {
                return BAIL;
            }
            continue;
        }
        if (c < 0x20) return BAIL;
        int n = utf8_seq(p, end);
        if (!n) return BAIL;
        p += n;
    }
}

/* A key: as parse_string, inlined for the common short plain key (its closing quote within
 * 24 bytes, nothing special before it). */
static ALWAYS_INLINE int parse_key(P *ps, const uint8_t **s, const uint8_t **e,
                                   int *escaped) {
#ifdef SWAR
    const uint8_t *p = ps->p + 1, *end = ps->end;
    for (int k = 0; k < 3 && end - p >= 8; k++) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t hit = special_bytes(w);
        if (hit) {
            const uint8_t *q = p + (__builtin_ctzll(hit) >> 3);
            if (*q != '"') break;
            *s = ps->p + 1;
            *e = q;
            *escaped = 0;
            ps->p = q + 1;
            return OK;
        }
        p += 8;
    }
#endif
    return parse_string(ps, s, e, escaped);
}

/* A number at ps->p, validated by JSON's grammar. */
typedef struct {
    const uint8_t *s, *e;
    uint64_t mant;  /* significant digits, up to 19 */
    int digits;     /* significant digits seen (beyond 19: too many for mant) */
    int exp10;      /* value = mant * 10^exp10 when digits <= 19 */
    int integer;    /* no fraction, no exponent */
    int neg;
} Num;

static inline int is_digit(uint8_t c) {
    return c >= '0' && c <= '9';
}

static int parse_number(P *ps, Num *n) {
    const uint8_t *p = ps->p, *end = ps->end;
    uint64_t mant = 0;
    int digits = 0, exp10 = 0, integer = 1, neg = 0;
    n->s = p;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end) return BAIL;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        const uint8_t *d = p;
        while (p < end && is_digit(*p)) p++;
        digits = (int)(p - d);
        int take = digits < 19 ? digits : 19;
        for (int i = 0; i < take; i++) mant = mant * 10 + (uint64_t)(d[i] - '0');
        exp10 = digits - take;
    } else {
        return BAIL;
    }
    if (p < end && *p == '.') {
        integer = 0;
        p++;
        const uint8_t *d = p;
        while (p < end && is_digit(*p)) p++;
        if (p == d) return BAIL;
        for (; d < p; d++) {
            if (digits >= 19) {
                digits += (int)(p - d); /* too many: the slow path reads the text */
                break;
            }
            if (mant || *d != '0') {
                mant = mant * 10 + (uint64_t)(*d - '0');
                digits++;
            }
            exp10--;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        integer = 0;
        p++;
        int eneg = 0;
        if (p < end && (*p == '+' || *p == '-')) {
            eneg = *p == '-';
            p++;
        }
        if (p >= end || !is_digit(*p)) return BAIL;
        int ev = 0;
        while (p < end && is_digit(*p)) {
            if (ev < 100000) ev = ev * 10 + (*p - '0');
            p++;
        }
        exp10 += eneg ? -ev : ev;
    }
    n->e = p;
    n->mant = mant;
    n->digits = digits;
    n->exp10 = exp10;
    n->integer = integer;
    n->neg = neg;
    ps->p = p;
    return OK;
}

/* A number skipped: validated by JSON's grammar only. */
static int skip_number(P *ps) {
    const uint8_t *p = ps->p, *end = ps->end;
    if (p < end && *p == '-') p++;
    if (p >= end) return BAIL;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && is_digit(*p)) p++;
    } else {
        return BAIL;
    }
    if (p < end && *p == '.') {
        const uint8_t *d = ++p;
        while (p < end && is_digit(*p)) p++;
        if (p == d) return BAIL;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        const uint8_t *d = p;
        while (p < end && is_digit(*p)) p++;
        if (p == d) return BAIL;
    }
    ps->p = p;
    return OK;
}

/* The number as a float64, correctly rounded (as msgspec and Python parse it). Exact fast path
 * (Clinger): a mantissa below 2^53 times or over a power of ten that is itself exact; anything
 * else through Python's own correctly rounded parser. Returns BAIL if the text is too long to
 * copy, NOMEM if Python failed. */
static int num_float(const Num *n, double *out) {
    if (n->digits <= 19 && n->mant <= (1ULL << 53) && n->exp10 >= -22 && n->exp10 <= 22) {
        double m = (double)n->mant;
        double v = n->exp10 >= 0 ? m * POW10[n->exp10] : m / POW10[-n->exp10];
        /* "-0" is the integer 0 (msgspec reads an integer literal as an int, then a float):
         * only a fraction or an exponent makes a negative zero */
        *out = n->neg && !(n->integer && n->mant == 0) ? -v : v;
        return OK;
    }
    char tmp[128];
    size_t len = (size_t)(n->e - n->s);
    if (len >= sizeof tmp) return BAIL;
    memcpy(tmp, n->s, len);
    tmp[len] = 0;
    char *stop = NULL;
    double v = PyOS_string_to_double(tmp, &stop, NULL);
    if (v == -1.0 && PyErr_Occurred()) return NOMEM;
    if (stop != tmp + len) return BAIL;
    *out = v;
    return OK;
}

/* The number as an int64 when it is a plain integer literal of at most 18 digits. */
static inline int num_int(const Num *n, int64_t *out) {
    if (!n->integer || n->digits > 18) return 0;
    *out = n->neg ? -(int64_t)n->mant : (int64_t)n->mant;
    return 1;
}

/* After a member of an object or an array: a ',' (MORE: the next member follows) or the closing
 * byte (DONE), white space skipped; BAIL on anything else. */
enum { MORE = 3, DONE = 4 };

static inline int after_member(P *ps, uint8_t close) {
    skip_ws(ps);
    if (ps->p >= ps->end) return BAIL;
    if (*ps->p == ',') {
        ps->p++;
        skip_ws(ps);
        return MORE;
    }
    if (*ps->p == close) {
        ps->p++;
        return DONE;
    }
    return BAIL;
}

static int skip_value(P *ps);

static int skip_container(P *ps, uint8_t close) {
    if (++ps->depth > MAX_DEPTH) return BAIL;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        ps->depth--;
        return OK;
    }
    for (;;) {
        if (close == '}') {
            const uint8_t *s, *e;
            int esc;
            if (ps->p >= ps->end || *ps->p != '"') return BAIL;
            if (parse_key(ps, &s, &e, &esc)) return BAIL;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') return BAIL;
            ps->p++;
            skip_ws(ps);
        }
        int r = skip_value(ps);
        if (r) return r;
        r = after_member(ps, close);
        if (r == DONE) {
            ps->depth--;
            return OK;
        }
        if (r != MORE) return r;
    }
}

static int skip_literal(P *ps, const char *word, size_t n) {
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) return BAIL;
    ps->p += n;
    return OK;
}

/* Any JSON value at ps->p (no leading white space), validated and skipped. */
static int skip_value(P *ps) {
    if (ps->p >= ps->end) return BAIL;
    switch (*ps->p) {
        case '"': {
            const uint8_t *s, *e;
            int esc;
            return parse_string(ps, &s, &e, &esc);
        }
        case '{':
            return skip_container(ps, '}');
        case '[':
            return skip_container(ps, ']');
        case 't':
            return skip_literal(ps, "true", 4);
        case 'f':
            return skip_literal(ps, "false", 5);
        case 'n':
            return skip_literal(ps, "null", 4);
        default:
            return skip_number(ps);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* events */

typedef struct {
    int32_t *cat, *name, *idims, *itype, *cinp;
    double *ts, *dur;
    int64_t *pid, *tid, *corr, *device, *stream, *dims;
    size_t rows, cap; /* rows written, rows allocated (every column) */
    size_t tids_read, tids_left; /* X rows whose string tid was read here / left to Python */
    Buf python;
    Intern strings, texts;
} Out;

#define GROW(field, type, per)                                                        \
    do {                                                                              \
        type *q = (type *)realloc(o->field, cap * (per) * sizeof(type));              \
        if (!q) return -1;                                                            \
        o->field = q;                                                                 \
    } while (0)

static int out_grow(Out *o) {
    size_t cap = o->cap ? 2 * o->cap : 4096;
    GROW(cat, int32_t, 1);
    GROW(name, int32_t, 1);
    GROW(idims, int32_t, 1);
    GROW(itype, int32_t, 1);
    GROW(cinp, int32_t, 1);
    GROW(ts, double, 1);
    GROW(dur, double, 1);
    GROW(pid, int64_t, 1);
    GROW(tid, int64_t, 1);
    GROW(corr, int64_t, 1);
    GROW(device, int64_t, 1);
    GROW(stream, int64_t, 1);
    GROW(dims, int64_t, N_DIMS);
    o->cap = cap;
    return 0;
}

/* One event's fields as read; the row is written only for an X event. */
typedef struct {
    const uint8_t *ph_s, *ph_e;
    int has_ph;
    int32_t cat, name;
    double ts, dur;
    int64_t pid, tid, corr, device, stream;
    int64_t dims[N_DIMS];
    int32_t idims, itype, cinp;
    int flag;
    int tid_kind; /* 1: a string tid read here (tid_field), 2: a string tid left to Python */
} Ev;

#define KEY(s, e, lit) ((size_t)((e) - (s)) == sizeof(lit) - 1 && memcmp((s), (lit), sizeof(lit) - 1) == 0)

/* an int64 field: a plain integer literal, else the event is flagged */
static int int_field(P *ps, Ev *ev, int64_t *dst) {
    if (ps->p < ps->end && (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))) {
        Num n;
        if (parse_number(ps, &n)) return BAIL;
        if (!num_int(&n, dst)) ev->flag = 1;
        return OK;
    }
    ev->flag = 1;
    return skip_value(ps);
}

/* A string tid (the PyTorch 1.8 schema writes "stream 7" and "3004819264") as the msgspec path
 * turns it into the column's int (_values.to_int: the first number written in it, -1 when it has
 * none or the number is out of int64 range), for the strings where that path cannot decide
 * otherwise: ASCII without escapes, and either a plain -?[0-9]+ (every way of converting it
 * agrees) or one Python's int() rejects (a character besides digits, '_', signs and white
 * space: numpy's conversion of the column then fails too, and to_int decides). Any other
 * value goes through int_field (flagged when not a plain integer), as before; a chunk with both
 * kinds of string tid is declined (see scan). */
static int tid_field(P *ps, Ev *ev, int64_t *dst) {
    ev->tid_kind = 0;
    if (!(ps->p < ps->end && *ps->p == '"')) return int_field(ps, ev, dst);
    ev->tid_kind = 2; /* until read below */
    const uint8_t *s = ps->p + 1, *q = s;
    int digits = 0, plain = 1, rejects = 0;
    for (; q < ps->end && *q != '"'; q++) {
        uint8_t c = *q;
        if (c == '\\' || c < 0x20 || c >= 0x80) return int_field(ps, ev, dst);
        if (c >= '0' && c <= '9') {
            digits = 1;
            continue;
        }
        if (!(q == s && c == '-')) plain = 0;
        if (!(c == '_' || c == '+' || c == '-' || c == ' ' || (c >= '\t' && c <= '\r')))
            rejects = 1;
    }
    if (q >= ps->end) return int_field(ps, ev, dst);
    if (!digits) rejects = 1; /* no digit: int() rejects it too */
    if (!((plain && digits) || rejects)) return int_field(ps, ev, dst);
    int64_t val = -1;
    for (const uint8_t *i = s; i < q; i++) {
        int neg = *i == '-' && i + 1 < q && i[1] >= '0' && i[1] <= '9';
        if (!neg && !(*i >= '0' && *i <= '9')) continue;
        const uint8_t *j = i + neg;
        uint64_t mag = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
        int over = 0;
        for (; j < q && *j >= '0' && *j <= '9'; j++) {
            if (!over && mag > (lim - (uint64_t)(*j - '0')) / 10) over = 1;
            if (!over) mag = mag * 10 + (uint64_t)(*j - '0');
        }
        if (!over) val = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag)
                             : (int64_t)mag;
        break;
    }
    *dst = val;
    ev->tid_kind = 1;
    ps->p = q + 1;
    return OK;
}

static int float_field(P *ps, Ev *ev, double *dst) {
    if (ps->p < ps->end && (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))) {
        Num n;
        if (parse_number(ps, &n)) return BAIL;
        int r = num_float(&n, dst);
        if (r == NOMEM) return NOMEM;
        if (r == BAIL || !isfinite(*dst)) ev->flag = 1;
        return OK;
    }
    ev->flag = 1;
    return skip_value(ps);
}

static int str_field(P *ps, Ev *ev, Out *o, int32_t *dst) {
    if (ps->p < ps->end && *ps->p == '"') {
        const uint8_t *s, *e;
        int esc;
        if (parse_string(ps, &s, &e, &esc)) return BAIL;
        int32_t id = intern(&o->strings, ps->base, (size_t)(s - ps->base), (size_t)(e - s));
        if (id < 0) return NOMEM;
        *dst = id;
        return OK;
    }
    ev->flag = 1;
    return skip_value(ps);
}

/* args.grid / args.block: exactly three plain int64 integers, else flagged */
static int dims_field(P *ps, Ev *ev, int64_t *dst) {
    const uint8_t *start = ps->p;
    int depth = ps->depth;
    if (ps->p < ps->end && *ps->p == '[') {
        ps->p++;
        int k = 0, good = 1;
        for (;;) {
            skip_ws(ps);
            if (ps->p >= ps->end) return BAIL;
            if (k == 0 && *ps->p == ']') {
                good = 0;
                break;
            }
            if (!(*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))) {
                good = 0;
                break;
            }
            Num n;
            int64_t v;
            if (parse_number(ps, &n)) return BAIL;
            if (k >= 3 || !num_int(&n, &v)) {
                good = 0;
                break;
            }
            dst[k++] = v;
            skip_ws(ps);
            if (ps->p >= ps->end) return BAIL;
            if (*ps->p == ',') {
                ps->p++;
                continue;
            }
            if (*ps->p == ']') {
                ps->p++;
                break;
            }
            return BAIL;
        }
        if (good && k == 3) return OK;
        /* not three ints: start over and skip it as any value */
        ps->p = start;
        ps->depth = depth;
        dst[0] = dst[1] = dst[2] = -1;
    }
    ev->flag = 1;
    return skip_value(ps);
}

/* A value kept as its raw JSON text (``Input Dims``, ``Input type``, ``Concrete Inputs``: the
 * Python side parses the few it needs): interned, its id in *dst. */
static int raw_field(P *ps, Out *o, int32_t *dst) {
    const uint8_t *vs = ps->p;
    int r = skip_value(ps);
    if (!r) {
        int32_t id = intern(&o->texts, ps->base, (size_t)(vs - ps->base), (size_t)(ps->p - vs));
        if (id < 0) return NOMEM;
        *dst = id;
    }
    return r;
}

static int parse_args(P *ps, Ev *ev, Out *o) {
    unsigned seen = 0;
    if (++ps->depth > MAX_DEPTH) return BAIL;
    ps->p++; /* '{' */
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        ps->depth--;
        return OK;
    }
    for (;;) {
        const uint8_t *s, *e;
        int esc, r;
        if (ps->p >= ps->end || *ps->p != '"') return BAIL;
        if (parse_key(ps, &s, &e, &esc)) return BAIL;
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') return BAIL;
        ps->p++;
        skip_ws(ps);
        unsigned bit = 0;
        if (esc) {
            ev->flag = 1; /* a key msgspec would unescape: it decides */
            r = skip_value(ps);
        } else if (KEY(s, e, "correlation")) {
            bit = 1;
            r = int_field(ps, ev, &ev->corr);
        } else if (KEY(s, e, "device")) {
            bit = 2;
            r = int_field(ps, ev, &ev->device);
        } else if (KEY(s, e, "stream")) {
            bit = 4;
            r = int_field(ps, ev, &ev->stream);
        } else if (KEY(s, e, "grid")) {
            bit = 8;
            r = dims_field(ps, ev, ev->dims);
        } else if (KEY(s, e, "block")) {
            bit = 16;
            r = dims_field(ps, ev, ev->dims + 3);
        } else if (KEY(s, e, "Input Dims")) {
            bit = 32;
            r = raw_field(ps, o, &ev->idims);
        } else if (KEY(s, e, "Input type")) {
            bit = 64;
            r = raw_field(ps, o, &ev->itype);
        } else if (KEY(s, e, "Concrete Inputs")) {
            bit = 128;
            r = raw_field(ps, o, &ev->cinp);
        } else if (KEY(s, e, "name") || KEY(s, e, "Collective name") ||
                   KEY(s, e, "In msg nelems") || KEY(s, e, "Out msg nelems") ||
                   KEY(s, e, "dtype") || KEY(s, e, "Group size") ||
                   KEY(s, e, "Process Group Name") || KEY(s, e, "Seq") || KEY(s, e, "seq") ||
                   KEY(s, e, "wait_on_stream") ||
                   KEY(s, e, "wait_on_cuda_event_record_corr_id")) {
            ev->flag = 1; /* read by Python from the decoded event */
            r = skip_value(ps);
        } else {
            r = skip_value(ps);
        }
        if (r) return r;
        if (bit) {
            if (seen & bit) ev->flag = 1; /* a duplicate: msgspec keeps the last */
            seen |= bit;
        }
        r = after_member(ps, '}');
        if (r == DONE) {
            ps->depth--;
            return OK;
        }
        if (r != MORE) return r;
    }
}

/* the phases of the Chrome trace event format (as _decode.PHASES) */
static int known_phase(uint8_t c) {
    return c && strchr("BEXiICbneSTpFstfPONDMVvRc()", c) != NULL;
}

static int put_python(Out *o, int64_t row, const uint8_t *base, const uint8_t *s,
                      const uint8_t *e) {
    int64_t t[3] = {row, (int64_t)(s - base), (int64_t)(e - base)};
    return buf_put(&o->python, t, sizeof t) ? NOMEM : OK;
}

static int put_row(Out *o, const Ev *ev) {
    if (o->rows == o->cap && out_grow(o)) return NOMEM;
    size_t r = o->rows++;
    o->cat[r] = ev->cat;
    o->name[r] = ev->name;
    o->idims[r] = ev->idims;
    o->itype[r] = ev->itype;
    o->cinp[r] = ev->cinp;
    o->ts[r] = ev->ts;
    o->dur[r] = ev->dur;
    o->pid[r] = ev->pid;
    o->tid[r] = ev->tid;
    o->corr[r] = ev->corr;
    o->device[r] = ev->device;
    o->stream[r] = ev->stream;
    memcpy(o->dims + N_DIMS * r, ev->dims, sizeof ev->dims);
    return OK;
}

/* The empty string's local id: a missing cat / name reads as "" (the structs' default). */
static int32_t empty_id(Out *o, const uint8_t *base) {
    return intern(&o->strings, base, 0, 0);
}

static int parse_event(P *ps, Out *o) {
    Ev ev;
    unsigned seen = 0;
    const uint8_t *start = ps->p;
    ev.has_ph = 0;
    ev.cat = ev.name = -1;
    ev.ts = ev.dur = NAN;
    ev.pid = ev.tid = ev.corr = ev.device = ev.stream = -1;
    for (int i = 0; i < N_DIMS; i++) ev.dims[i] = -1;
    ev.idims = ev.itype = ev.cinp = -1;
    ev.flag = 0;
    ev.tid_kind = 0;
    if (ps->p >= ps->end || *ps->p != '{') return BAIL;
    if (++ps->depth > MAX_DEPTH) return BAIL;
    ps->p++;
    skip_ws(ps);
    int empty = ps->p < ps->end && *ps->p == '}';
    if (empty) ps->p++;
    while (!empty) {
        const uint8_t *s, *e;
        int esc, r;
        if (ps->p >= ps->end || *ps->p != '"') return BAIL;
        if (parse_key(ps, &s, &e, &esc)) return BAIL;
        if (esc) return BAIL; /* an escaped key at the top of an event: msgspec decides all */
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') return BAIL;
        ps->p++;
        skip_ws(ps);
        unsigned bit = 0;
        if (KEY(s, e, "ph")) {
            bit = 1;
            if (seen & bit) return BAIL; /* two tags */
            if (ps->p >= ps->end || *ps->p != '"') return BAIL;
            if (parse_string(ps, &ev.ph_s, &ev.ph_e, &esc)) return BAIL;
            if (esc) return BAIL;
            ev.has_ph = 1;
            r = OK;
        } else if (ev.has_ph && ev.ph_s[0] != 'X') {
            r = skip_value(ps); /* not a row (Kineto writes "ph" first): only validated */
        } else if (KEY(s, e, "ts")) {
            bit = 2;
            r = float_field(ps, &ev, &ev.ts);
        } else if (KEY(s, e, "dur")) {
            bit = 4;
            r = float_field(ps, &ev, &ev.dur);
        } else if (KEY(s, e, "name")) {
            bit = 8;
            r = str_field(ps, &ev, o, &ev.name);
        } else if (KEY(s, e, "cat")) {
            bit = 16;
            r = str_field(ps, &ev, o, &ev.cat);
        } else if (KEY(s, e, "pid")) {
            bit = 32;
            r = int_field(ps, &ev, &ev.pid);
        } else if (KEY(s, e, "tid")) {
            bit = 64;
            r = tid_field(ps, &ev, &ev.tid);
        } else if (KEY(s, e, "args")) {
            bit = 128;
            if (ps->p < ps->end && *ps->p == '{') {
                r = parse_args(ps, &ev, o);
            } else {
                ev.flag = 1;
                r = skip_value(ps);
            }
        } else {
            r = skip_value(ps);
        }
        if (r) return r;
        if (seen & bit) ev.flag = 1; /* a duplicate: msgspec keeps the last */
        seen |= bit;
        r = after_member(ps, '}');
        if (r == DONE) break;
        if (r != MORE) return r;
    }
    ps->depth--;
    if (!ev.has_ph || ev.ph_e - ev.ph_s != 1 || !known_phase(ev.ph_s[0])) return BAIL;
    uint8_t ph = ev.ph_s[0];
    if (ph == 'M') return put_python(o, -1, ps->base, start, ps->p);
    if (ph != 'X') return OK;
    if (ev.cat < 0 && (ev.cat = empty_id(o, ps->base)) < 0) return NOMEM;
    if (ev.name < 0 && (ev.name = empty_id(o, ps->base)) < 0) return NOMEM;
    if (ev.flag && put_python(o, (int64_t)o->rows, ps->base, start, ps->p)) return NOMEM;
    o->tids_read += ev.tid_kind == 1;
    o->tids_left += ev.tid_kind == 2;
    return put_row(o, &ev);
}

static int parse_array(P *ps, Out *o) {
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != '[') return BAIL;
    ps->p++;
    ps->depth = 1;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
    } else {
        for (;;) {
            int r = parse_event(ps, o);
            if (r) return r;
            r = after_member(ps, ']');
            if (r == DONE) break;
            if (r != MORE) return r;
        }
    }
    skip_ws(ps);
    return ps->p == ps->end ? OK : BAIL;
}

/* ------------------------------------------------------------------------------------------ */
/* the module */

static void out_free(Out *o) {
    void *cols[] = {o->cat,  o->name, o->idims,  o->ts,     o->dur,  o->pid,
                    o->tid,  o->corr, o->device, o->stream, o->dims, o->python.p,
                    o->itype, o->cinp};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) free(cols[i]);
    intern_free(&o->strings);
    intern_free(&o->texts);
}

static PyObject *bytes_of(const void *p, size_t n) {
    return PyBytes_FromStringAndSize(p ? (const char *)p : "", (Py_ssize_t)n);
}

static PyObject *span_list(const Intern *t, const uint8_t *base) {
    PyObject *list = PyList_New((Py_ssize_t)t->n);
    if (!list) return NULL;
    for (size_t i = 0; i < t->n; i++) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)base + t->spans[i].off,
                                                (Py_ssize_t)t->spans[i].len);
        if (!b) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, b);
    }
    return list;
}

static PyObject *scan(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Out o;
    memset(&o, 0, sizeof o);
    P ps = {(const uint8_t *)view.buf, (const uint8_t *)view.buf,
            (const uint8_t *)view.buf + view.len, 0};
    int r = parse_array(&ps, &o);
    /* The flagged rows' tids are converted together (_columns._with_flagged), numpy first and
     * _values.to_int for all when one fails, as the typed path converts a chunk's whole column.
     * A string tid read here is one that fails numpy: with it gone from that batch, the strings
     * left in it could convert the other way. Such a chunk is the msgspec path's, whole. */
    if (r == OK && o.tids_read && o.tids_left) r = BAIL;
    PyObject *result = NULL;
    if (r == NOMEM) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
    } else if (r == BAIL) {
        result = Py_NewRef(Py_None);
    } else {
        PyObject *strings = span_list(&o.strings, ps.base);
        PyObject *texts = strings ? span_list(&o.texts, ps.base) : NULL;
        if (texts) {
            size_t n = o.rows, i4 = 4 * n, i8 = 8 * n;
            result = Py_BuildValue(
                "(LNNNNNNNNNNNNNNNN)", (long long)n, bytes_of(o.cat, i4), bytes_of(o.name, i4),
                bytes_of(o.ts, i8), bytes_of(o.dur, i8), bytes_of(o.pid, i8),
                bytes_of(o.tid, i8), bytes_of(o.corr, i8), bytes_of(o.device, i8),
                bytes_of(o.stream, i8), bytes_of(o.dims, N_DIMS * i8), bytes_of(o.idims, i4),
                strings, texts, bytes_of(o.python.p, o.python.len), bytes_of(o.itype, i4),
                bytes_of(o.cinp, i4));
        } else {
            Py_XDECREF(strings);
        }
    }
    out_free(&o);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_O,
     "scan(buffer) -> None | tuple: the columns of a JSON array of Kineto events, or None "
     "when the msgspec path must read it (see the module's source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_kscan", "A columnar scanner of Kineto trace events.", -1, METHODS,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kscan(void) {
    init_tables();
    return PyModule_Create(&MODULE);
}
