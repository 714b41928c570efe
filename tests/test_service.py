"""The scoring service (`kernelbench serve`, scoring/service.py) through a real HTTP client on
127.0.0.1: one evaluation, a batch with cheats, deadlocks, a candidate that kills itself, one that
forks and one that floods its output mixed in (streamed as they finish; the service stays up and
the next request is judged as usual), no state carried from one request to the next, malformed
requests, a full queue, and the token rules. KB_SERVICE_BATCH sets the batch size (default 8;
the issue's 32 on a machine with the cores for it)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kbrun import RING, inner_env, leftover_processes, make_tree

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.e2e

sys.path.insert(0, str(Path(__file__).parent / "cheats"))     # the red team's candidates, as they are
from test_cheat_patching import CHEATS  # noqa: E402

DEADLOCK = '''import torch
import torch.distributed as dist

def solution(x):
    buf = torch.empty_like(x)
    if dist.get_rank() == 0:
        dist.recv(buf, 1)         # nobody sends
    return x.clone()
'''
KILLS_ITSELF = "import os, signal\n\ndef solution(x):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
FORKS = RING.replace("def solution(x):", "import os\n\ndef solution(x):\n    if os.fork() == 0:\n"
                     "        import time\n        time.sleep(600)\n        os._exit(0)")
FLOODS = RING.replace("def solution(x):", "import sys\n\ndef solution(x):\n    for _ in range(20000):\n"
                      "        print('x' * 400, file=sys.stderr)")
SETS_STATE = RING.replace("def solution(x):", "import builtins, os\nbuiltins.KB_LEAK = 1\n"
                          "os.environ['KB_LEAK'] = '1'\n\ndef solution(x):")
SEES_STATE = RING.replace("def solution(x):", "import builtins, os\n_LEAK = hasattr(builtins, 'KB_LEAK') or "
                          "'KB_LEAK' in os.environ\n\ndef solution(x):\n    if _LEAK:\n        return x.clone()")
CANDIDATES = {"honest": RING, "wrong": "def solution(x):\n    return x.clone()\n", "deadlock": DEADLOCK,
              "forbidden": "import torch.distributed as dist\n\ndef solution(x):\n    y = x.clone()\n"
                           "    dist.all_reduce(y)\n    return y\n",
              "cheat": CHEATS["global_dispatch_mode"], "kills_itself": KILLS_ITSELF, "forks": FORKS, "floods": FLOODS,
              "sets_state": SETS_STATE, "sees_state": SEES_STATE, "all_reduce": RING}
# the candidate's verdict (disposition valid) for each: the harness judges it, the service only carries it
EXPECTED = {"honest": ("passed", None), "wrong": ("failed", "mismatch"), "deadlock": ("failed", "timeout"),
            "forbidden": ("failed", "forbidden_call"), "cheat": ("failed", "forbidden_call"),
            "kills_itself": ("failed", "crash"), "forks": ("failed", "forbidden_call"), "floods": ("passed", None)}
OPTIONS = {"world_size": 2, "sizes": ["tiny"], "timing": False, "pg_timeout": 10, "timeout": 60}
BATCH = int(os.environ.get("KB_SERVICE_BATCH", "8"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, root: Path, problems: Path, *args: str, token: str | None = None) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = inner_env()
        env.pop("KB_SERVE_TOKEN", None)
        self.log = open(root / f"serve-{self.port}.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "pytest_kernelbench.cli", "serve", "--port", str(self.port),
                                      "--problems", str(problems), *args, *(["--token", token] if token else [])],
                                     cwd=root, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=self.url, timeout=300, headers=headers)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            assert self.proc.poll() is None, Path(self.log.name).read_text()
            try:
                if self.client.get("/v1/health").status_code in (200, 401):
                    return
            except httpx.TransportError:
                time.sleep(0.3)
        raise AssertionError("the service did not start: " + Path(self.log.name).read_text())

    def stop(self) -> None:
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("service")
    problems, _ = make_tree(root, CANDIDATES)
    return root, problems


@pytest.fixture(scope="module")
def server(tree):
    root, problems = tree
    srv = Server(root, problems, "--workers", "2", "--queue", str(max(BATCH, 8)))
    yield srv
    srv.stop()
    assert not leftover_processes(str(root))


def _eval(srv: Server, name: str, **extra) -> dict:
    r = srv.client.post("/v1/evaluate", json={"problem": f"collective/{name}", "code": CANDIDATES[name],
                                              "options": OPTIONS, "wait": 240, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_one_evaluation_health_and_problems(server):
    health = server.client.get("/v1/health").json()
    assert health["status"] == "ok" and health["api"] == "v1" and health["workers"] == 2
    assert health["queue"]["pending"] == 0 and health["gpus"]["count"] == 0
    listed = {p["id"]: p for p in server.client.get("/v1/problems").json()["problems"]}
    assert "collective/honest" in listed and listed["collective/honest"]["world_sizes"] == [2, 4, 8]
    out = _eval(server, "honest", options={**OPTIONS, "reward": "binary"})
    ev = out["evaluation"]
    assert out["status"] == "done" and (ev["outcome"], ev["disposition"]) == ("passed", "valid")
    assert ev["reward"] == {"preset": "binary", "version": 1, "value": 1.0}
    assert ev["record"]["problem"] == "collective/honest" and ev["feedback"].startswith("## Result of your round 1")
    # polled by id as well
    again = server.client.get(f"/v1/evaluations/{out['id']}").json()
    assert again["status"] == "done" and again["evaluation"]["outcome"] == "passed"


def test_a_batch_with_cheats_and_deadlocks_streams_and_the_service_stays_up(server):
    names = [n for n in CANDIDATES if n not in ("sets_state", "sees_state", "all_reduce")]
    reqs = [{"problem": f"collective/{names[k % len(names)]}", "code": CANDIDATES[names[k % len(names)]],
             "id": f"{names[k % len(names)]}-{k}"} for k in range(BATCH)]
    t0 = time.monotonic()
    r = server.client.post("/v1/batches", json={"requests": reqs, "options": OPTIONS})
    assert r.status_code == 202, r.text
    batch = r.json()
    assert len(batch["ids"]) == BATCH
    seen = []
    with server.client.stream("GET", batch["stream"], timeout=600) as stream:
        for line in stream.iter_lines():
            if line.strip():
                seen.append(json.loads(line))
    took = time.monotonic() - t0
    assert sorted(s["id"] for s in seen) == sorted(batch["ids"])
    for s in seen:
        name = s["id"].rsplit("-", 1)[0]
        ev = s["evaluation"]
        # every one judged as the candidate's (nothing lost to the service or a worker)
        assert s["status"] == "done" and ev["disposition"] == "valid", (name, ev["record"].get("message"))
        if name in EXPECTED:
            assert (ev["outcome"], ev["failure"]) == EXPECTED[name], (name, ev["record"].get("message"))
    status = server.client.get(f"/v1/batches/{batch['batch']}").json()
    assert status["done"] == status["total"] == BATCH
    # still up, and the next request is judged as usual
    assert server.client.get("/v1/health").json()["queue"]["pending"] == 0
    assert _eval(server, "honest")["evaluation"]["outcome"] == "passed"
    print(f"batch of {BATCH}: {took:.1f} s")


def test_no_state_leaks_from_one_request_to_the_next(server):
    first = _eval(server, "sets_state")["evaluation"]
    assert first["outcome"] == "passed", first["record"].get("message")
    second = _eval(server, "sees_state")["evaluation"]
    assert second["outcome"] == "passed", second["record"].get("message")    # x.clone() if it saw the state


def test_malformed_requests_get_a_clear_4xx(server):
    c = server.client
    good = {"problem": "collective/honest", "code": RING}
    assert c.post("/v1/evaluate", content=b"{not json", headers={"content-type": "application/json"}).status_code == 422
    assert c.post("/v1/evaluate", json={"problem": "collective/honest"}).status_code == 422            # no code
    assert c.post("/v1/evaluate", json={**good, "extra": 1}).status_code == 422
    assert c.post("/v1/evaluate", json={**good, "code": "x" * (256 * 1024 + 1)}).status_code == 422
    assert c.post("/v1/evaluate", json={**good, "code": "x" * (5 * 1024 * 1024)}).status_code == 413
    r = c.post("/v1/evaluate", json={**good, "problem": "collective/no_such"})
    assert r.status_code == 404 and "unknown problem" in r.json()["detail"]
    assert c.post("/v1/evaluate", json={**good, "problem": "../../etc/passwd"}).status_code == 404
    r = c.post("/v1/evaluate", json={**good, "options": {"allow_multicast": True}})
    assert r.status_code == 422 and "unknown option" in r.json()["detail"]
    assert c.post("/v1/evaluate", json={**good, "options": {"trials": -1}}).status_code == 422
    assert c.post("/v1/batches", json={"requests": []}).status_code == 422
    r = c.post("/v1/evaluate", json={**good, "options": {"reward": "nope"}})
    assert r.status_code == 422 and "unknown reward preset" in r.json()["detail"]
    assert c.get("/v1/evaluations/nope").status_code == 404
    assert c.get("/v1/batches/nope").status_code == 404
    assert c.get("/v1/health").json()["status"] == "ok"


def test_a_full_queue_is_429_and_runs_nothing(tree):
    root, problems = tree
    srv = Server(root, problems, "--workers", "1", "--queue", "0")
    try:
        r = srv.client.post("/v1/evaluate", json={"problem": "collective/deadlock", "code": DEADLOCK, "options": OPTIONS})
        assert r.status_code == 202, r.text
        r2 = srv.client.post("/v1/evaluate", json={"problem": "collective/honest", "code": RING, "options": OPTIONS})
        assert r2.status_code == 429 and "queue is full" in r2.json()["detail"] and r2.headers["retry-after"]
        r3 = srv.client.post("/v1/batches", json={"requests": [{"problem": "collective/honest", "code": RING}]})
        assert r3.status_code == 429
        done = srv.client.get(f"/v1/evaluations/{r.json()['id']}", params={"wait": 240}).json()
        assert done["evaluation"]["failure"] == "timeout"
    finally:
        srv.stop()


def test_a_token_is_required_when_set_and_for_any_non_local_address(tree):
    root, problems = tree
    env = inner_env()
    env.pop("KB_SERVE_TOKEN", None)
    proc = subprocess.run([sys.executable, "-m", "pytest_kernelbench.cli", "serve", "--host", "0.0.0.0",
                           "--port", str(_free_port()), "--problems", str(problems)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "needs a bearer token" in proc.stderr, proc.stderr
    srv = Server(root, problems, "--workers", "1", token="s3cret")
    try:
        bare = httpx.get(f"{srv.url}/v1/health", timeout=30)
        assert bare.status_code == 401 and bare.headers["www-authenticate"] == "Bearer"
        wrong = httpx.post(f"{srv.url}/v1/evaluate", json={"problem": "collective/honest", "code": RING},
                           headers={"Authorization": "Bearer nope"}, timeout=30)
        assert wrong.status_code == 401
        assert srv.client.get("/v1/health").status_code == 200
    finally:
        srv.stop()


def test_the_training_loop_client_of_the_docs_runs_against_the_service(server, tmp_path):
    """docs/training.md's worked example, as the page shows it: a batch of model answers scored
    through the service, one reward per rollout."""
    import re
    page = (Path(__file__).resolve().parent.parent / "docs" / "training.md").read_text()
    code = re.findall(r"```python\n(.*?)\n```\n", page, re.S)[-1]
    (tmp_path / "client.py").write_text(code)
    proc = subprocess.run([sys.executable, "client.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**inner_env(), "KB_SERVICE_URL": server.url})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[0.3, 0.0, -1.0]", proc.stdout
    assert "rollout-2: valid failed forbidden_call reward -1.0" in proc.stdout
