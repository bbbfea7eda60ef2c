"""An output whose middle the transport dropped (CommandOutput.truncated) never passes: the cut
middle could hold the Xid, the row or the error that would have failed the node."""

from __future__ import annotations

from checks import get_check, run_check
from checks.core.base import ERROR, FAIL, PASS, Command, CommandOutput, NodeContext
from checks.core.profiles import resolve_thresholds
from checks.gpu.xid import KERNEL_LOG_LABEL, KERNEL_LOG_MARK, kernel_log_command
from tests.checks.probe_docs import REPO, gpu_doc, output, probe_doc
from worker.ssh import LocalTransport, NodeTarget

NODE = NodeContext(hostname="gpu001")
CLEAN = "".join(f"[{i}.000000] usb 1-1: new high-speed USB device number {i}\n" for i in range(1, 400))
XID79 = "[0.500000] NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"


def kernel(stdout: str, *, truncated: bool) -> CommandOutput:
    return CommandOutput(kernel_log_command(None), stdout, "", 0, False, 1.0, truncated=truncated)


def ecc(log: str, *, truncated: bool):
    outputs = [*output(probe_doc(8, gpus=[gpu_doc(i) for i in range(8)])), kernel(log, truncated=truncated)]
    return run_check(get_check("ecc_health"), None, resolve_thresholds("ecc_health", "H100-SXM-8"), outputs, NODE)


def test_it_turns_a_pass_on_a_cut_kernel_log_into_an_error() -> None:
    log = CLEAN + f"\n{KERNEL_LOG_MARK} source=dmesg rc=0\n"
    assert ecc(log, truncated=False)[1].status == PASS
    measurements, verdict = ecc(log, truncated=True)
    assert verdict.status == ERROR
    assert verdict.reason == (
        "output truncated by the transport (kernel log: over its read cap); what was cut cannot be judged"
    )
    assert measurements, "what was read is kept for the record"


def test_it_keeps_a_fail_found_in_what_was_kept() -> None:
    log = XID79 + CLEAN + f"\n{KERNEL_LOG_MARK} source=dmesg rc=0\n"
    _, verdict = ecc(log, truncated=True)
    assert verdict.status == FAIL
    assert verdict.reason.startswith("GPU 3: Xid 79 (GPU has fallen off the bus)")


def test_it_errors_on_an_ibstat_output_the_transport_cut() -> None:
    text = (REPO / "tests/fixtures/ibstat/ibstat_H100_node_8xNDR400_some_down.txt").read_text()
    command = Command(argv=("ibstat",), timeout=30, label="ibstat")
    for truncated, expected in ((False, {"pass", "warn"}), (True, {ERROR})):
        out = CommandOutput(command, text, "", 0, False, 0.1, truncated=truncated)
        _, verdict = run_check(get_check("ib_ports"), None, None, [out], NODE)
        assert verdict.status in expected, (truncated, verdict)


def test_it_errors_end_to_end_when_a_kernel_log_overflows_the_transport_cap() -> None:
    """A real command through the local transport: a clean but huge kernel log (no Xid anywhere)
    over a 64 KiB cap comes back truncated, and ecc_health says it could not tell."""
    script = (
        "import sys\n"
        "for i in range(200000): sys.stdout.write('[%d.000000] usb 1-1: new high-speed USB device\\n' % i)\n"
        f"sys.stdout.write('\\n{KERNEL_LOG_MARK} source=dmesg rc=0\\n')\n"
    )
    command = Command(argv=("python3", "-c", script, ""), timeout=60, label=KERNEL_LOG_LABEL)
    out = LocalTransport(NodeTarget(hostname="gpu001", transport="local", output_cap=64 * 1024)).run(command)
    assert out.truncated and out.stdout.endswith(f"{KERNEL_LOG_MARK} source=dmesg rc=0\n")
    outputs = [*output(probe_doc(8, gpus=[gpu_doc(i) for i in range(8)])), out]
    _, verdict = run_check(get_check("ecc_health"), None, resolve_thresholds("ecc_health", "H100-SXM-8"), outputs, NODE)
    assert verdict.status == ERROR and "output truncated by the transport" in verdict.reason
