"""``profile --nsys`` when nsys fails (issue 21): tried again once, then one line; the profiling
agent a failed nsys leaves behind is stopped, never left running."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest

from traceoverlap.core.errors import TraceoverlapError
from traceoverlap.record import workloads as profile


def _fake_nsys(tmp_path: Path, fail_times: int) -> Path:
    """A stand-in `nsys profile` that starts an 'agent' (a sleeping python whose command line
    says --start-agent --session-name=...-<its own pid>, as nsys's does), then fails the first
    ``fail_times`` runs; the agent's pid goes to agents.txt."""
    count = tmp_path / "count"
    script = tmp_path / "nsys"
    script.write_text(
        "#!/bin/sh\n"
        f'{sys.executable} -c "import time; time.sleep(60)" --start-agent '
        "--session-name=profile-$$ </dev/null >/dev/null 2>&1 &\n"
        f'echo $! >> "{tmp_path}/agents.txt"\n'
        # the agent is up (exec'd) before nsys fails, as with the real one
        'a=$!; while ! grep -aq start-agent "/proc/$a/cmdline" 2>/dev/null; do sleep 0.05; done\n'
        f'n=$(cat "{count}" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "{count}"\n'
        f'if [ $n -le {fail_times} ]; then echo "terminate called after throwing" >&2; exit 1; fi\n'
        "exit 0\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("fail_times,ok", [(1, True), (2, False)])
def test_failed_nsys_is_retried_and_its_agent_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_times: int, ok: bool
) -> None:
    monkeypatch.setattr(profile, "NSYS_RETRY_WAIT_S", 0.0)
    script = _fake_nsys(tmp_path, fail_times)
    if ok:
        profile._run_nsys_profile([str(script)], timeout_s=30)
    else:
        with pytest.raises(TraceoverlapError, match="nsys profile failed 2 times"):
            profile._run_nsys_profile([str(script)], timeout_s=30)
    runs = int((tmp_path / "count").read_text())
    assert runs == min(fail_times + 1, profile.NSYS_ATTEMPTS)
    agents = [int(x) for x in (tmp_path / "agents.txt").read_text().split()]
    time.sleep(0.2)
    # the agents of the failed runs are stopped; the one of a successful run is nsys's business
    failed_agents = agents[: min(fail_times, runs)]
    assert failed_agents and not [p for p in failed_agents if _alive(p)]
    for p in agents:  # clean up what this test started
        if _alive(p):
            os.kill(p, 9)
