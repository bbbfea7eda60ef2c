"""Does a `make up` demo stay up and tell the truth for hours? A soak against a running demo.

    python bench/demo_soak.py --checkout DIR --url http://127.0.0.1:8711/ [--hours 1] [--every 240]
                              [--plan quick --plan demo-acceptance] [--hogs 4]

Against a `make up` already running from DIR (its data folder, its web, worker and beat): every
--every seconds it starts the next --plan on the demo cluster through that checkout's `kiln run --wait --json`
(so through the broker and the worker, as the Start-a-run button does), and every 10 s it asks the web
for the login page. With --hogs N it runs N busy-loop processes beside it for the whole soak (two per
core is a laptop doing other work). At the end it prints one line per run (id, exit code, wall time,
verdict counts, the non-pass results) and a summary, and exits 1 when any run errored, any verdict
other than the demo's two known faults was not a pass, the web did not answer, or the console log
(--console, what `make up` printed) says a process died.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

# The demo's two faults (portal's demo seeding): every other verdict must be a pass.
KNOWN_FAULTS = {"demo03", "demo06"}


def _hog() -> None:
    while True:
        pass


def _web_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/login/", timeout=10) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, TimeoutError, ConnectionError):
        return False


def _run_once(checkout: Path, plan: str, timeout_s: float) -> dict[str, object]:
    started = time.monotonic()
    done = subprocess.run(
        [str(checkout / ".venv" / "bin" / "kiln"), "run", "demo", plan, "--wait", "--json"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "KILN_ALLOW_LOCAL_TRANSPORT": "1"},
    )
    wall = time.monotonic() - started
    try:
        verdicts = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"exit": done.returncode, "wall_s": wall, "problem": f"not JSON: {done.stderr[-500:]}"}
    results = verdicts.get("results", [])
    counts = Counter(r["status"] for r in results)
    unexpected = [
        f"{r['node']} x {r['check']}: {r['status']} ({r['reason'][:120]})"
        for r in results
        if r["status"] not in ("pass", "warn") and not (r["status"] == "fail" and r["node"] in KNOWN_FAULTS)
    ]
    return {
        "run": verdicts.get("run"),
        "exit": done.returncode,
        "wall_s": wall,
        "counts": dict(counts),
        "unexpected": unexpected,
    }


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--checkout", type=Path, required=True, help="the checkout `make up` runs from")
    parser.add_argument("--url", required=True)
    parser.add_argument("--console", type=Path, help="the file `make up`'s output goes to")
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--every", type=float, default=240.0, help="seconds between run starts")
    parser.add_argument("--plan", action="append", help="plans started in turn (default: quick)")
    parser.add_argument("--hogs", type=int, default=0)
    return parser.parse_args()


def _soak(args: argparse.Namespace, plans: list[str]) -> tuple[list[dict[str, object]], list[float]]:
    """Runs started every --every seconds and the web asked every 10 s until --hours is over:
    the runs' outcomes and the moments the web did not answer."""
    runs: list[dict[str, object]] = []
    web_down: list[float] = []
    began = time.monotonic()
    next_run = began
    while time.monotonic() < began + args.hours * 3600:
        if time.monotonic() >= next_run:
            next_run += args.every
            plan = plans[len(runs) % len(plans)]
            outcome = _run_once(args.checkout, plan, timeout_s=max(args.every * 3, 900))
            outcome.update(plan=plan, at_s=round(time.monotonic() - began), load=os.getloadavg()[0])
            runs.append(outcome)
            print(json.dumps(outcome), flush=True)
        if not _web_answers(args.url):
            web_down.append(time.monotonic() - began)
            print(f"web did not answer at {web_down[-1]:.0f} s", flush=True)
        time.sleep(10)
    return runs, web_down


def _deaths(console: str) -> list[str]:
    """The supervisor's lines about a program that ended on its own (portal/cli/supervise.py)."""
    said = ("exited with status", "was killed by", "giving up", "Unrecoverable")
    return [line for line in console.splitlines() if any(words in line for words in said)]


def main() -> int:
    args = _arguments()
    plans = args.plan or ["quick"]
    hogs = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    began = time.monotonic()
    try:
        runs, web_down = _soak(args, plans)
    finally:
        for hog in hogs:
            hog.terminate()
    deaths = _deaths(args.console.read_text(errors="replace") if args.console else "")
    bad = [r for r in runs if r.get("problem") or r.get("unexpected") or r["exit"] not in (0, 1)]
    loads = [float(str(r["load"])) for r in runs]
    print(
        f"{len(runs)} runs of {', '.join(plans)} in {(time.monotonic() - began) / 60:.0f} min "
        f"with {args.hogs} busy loops "
        f"(load average at the starts {min(loads, default=0):.1f}-{max(loads, default=0):.1f}): "
        f"{len(bad)} with an error or an unexpected verdict; the web did not answer {len(web_down)} times; "
        f"{len(deaths)} console lines about a process that died"
    )
    for line in deaths[:20]:
        print(f"  {line}")
    return 1 if bad or web_down or deaths or not runs else 0


if __name__ == "__main__":
    sys.exit(main())
