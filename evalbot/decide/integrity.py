"""Anti-forgery: what the parent can check itself instead of believing a child.

PR code runs inside the harness process, so it can print, patch timers or tamper with results.
The parent therefore:

- decides losslessness itself by comparing every DSpark stream with the same ref's AR stream
  (and holds the child's own claim against that);
- requires every run it asked for (runs == reps, lossless_runs and every per-run list consistent);
- checks token counts (== new_tokens unless the stream ends in EOS) and that every tok/s equals
  tokens / decode seconds within a tolerance;
- checks the decode seconds a child claims fit inside the wall-clock time the parent measured;
- cross-checks a claimed DSpark speedup against the parent's wall clock: if the PR says its
  decode took S seconds less per round, its subprocess must also take clearly less time;
- checks both refs measured the same workload (prompts, contexts, model, guards).

Nonces and the line schema are enforced earlier, in `evalbot.decide.contract.parse_output`.
Findings on the PR side are integrity failures (a gate -> REJECT); findings on main's side mean
the ruler itself is broken (infrastructure error); a workload mismatch means the two runs cannot
be compared (infrastructure error).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from evalbot.decide.contract import GuardLine, TauCheckLine
from evalbot.decide.records import Ref, RunRecord
from evalbot.decide.stats import median, rel_close
from evalbot.settings import IntegritySettings

FindingKind = Literal["integrity", "workload"]


class Finding(BaseModel):
    ref: Ref
    round: int | None = None
    kind: FindingKind = "integrity"
    message: str


class WallclockCheck(BaseModel):
    """Median over rounds of main-minus-PR seconds: what the PR claims vs what the parent saw."""

    evaluated: bool
    claimed_saving_s: float = 0.0
    wall_saving_s: float = 0.0
    required_s: float = 0.0
    plausible: bool = True


class IntegrityReport(BaseModel):
    findings: list[Finding] = Field(default_factory=list)
    wallclock: WallclockCheck = Field(default_factory=lambda: WallclockCheck(evaluated=False))

    def of(self, ref: Ref, kind: FindingKind = "integrity") -> list[Finding]:
        return [f for f in self.findings if f.ref == ref and f.kind == kind]


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token (a length difference counts); None if identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


def verified_lossless_runs(line: TauCheckLine) -> int:
    """DSpark runs whose stream equals the AR stream token for token, as the parent counts them."""
    return sum(1 for stream in line.dspark_tokens if list(stream) == list(line.ar_tokens))


def _count_ok(tokens: Sequence[int], new_tokens: int, eos: Sequence[int]) -> bool:
    if not tokens or len(tokens) > new_tokens:
        return False
    if len(tokens) == new_tokens:
        return True
    return not eos or tokens[-1] in eos


def check_tau_line(line: TauCheckLine, requested_reps: int, profile: str, cfg: IntegritySettings) -> list[str]:
    """Problems with one tau_check line on its own (empty list = consistent)."""
    tol = cfg.tps_rel_tolerance
    where = f"{line.prompt}@{line.ctx}"
    out: list[str] = []
    if line.profile != profile:
        out.append(f"{where}: profile {line.profile!r}, asked for {profile!r}")
    if line.runs != requested_reps:
        out.append(f"{where}: {line.runs} DSpark runs, asked for {requested_reps}")
    lists = {
        "dspark_tokens": len(line.dspark_tokens),
        "dspark_decode_s": len(line.dspark_decode_s),
        "dspark_tps_runs": len(line.dspark_tps_runs),
    }
    for name, n in lists.items():
        if n != line.runs:
            out.append(f"{where}: {name} has {n} entries for {line.runs} runs")
    verified = verified_lossless_runs(line)
    if line.lossless_runs != verified:
        out.append(f"{where}: claims {line.lossless_runs} lossless runs, the streams show {verified}")
    if line.lossless != (verified == line.runs and line.runs > 0):
        out.append(f"{where}: claims lossless={line.lossless}, the streams show {verified}/{line.runs} identical")
    if not _count_ok(line.ar_tokens, line.new_tokens, cfg.eos_token_ids):
        out.append(f"{where}: AR stream has {len(line.ar_tokens)} tokens for new_tokens={line.new_tokens}")
    for i, stream in enumerate(line.dspark_tokens):
        if not _count_ok(stream, line.new_tokens, cfg.eos_token_ids):
            out.append(f"{where}: DSpark run {i + 1} has {len(stream)} tokens for new_tokens={line.new_tokens}")
    if line.ar_tokens and not rel_close(line.ar_tps, len(line.ar_tokens) / line.ar_decode_s, tol):
        out.append(
            f"implausible timings: {where}: ar_tps {line.ar_tps:.2f} != "
            f"{len(line.ar_tokens)} tokens / {line.ar_decode_s:.4f} s"
        )
    for i, (stream, secs, tps) in enumerate(zip(line.dspark_tokens, line.dspark_decode_s, line.dspark_tps_runs)):
        if stream and not rel_close(tps, len(stream) / secs, tol):
            out.append(
                f"implausible timings: {where}: DSpark run {i + 1} reports {tps:.2f} tok/s "
                f"for {len(stream)} tokens in {secs:.4f} s"
            )
    if line.dspark_tps_runs and not rel_close(line.dspark_tps, median(line.dspark_tps_runs), tol):
        out.append(f"implausible timings: {where}: dspark_tps {line.dspark_tps:.2f} is not the median of its runs")
    if len(line.accept_hist) != line.block_size + 1:
        out.append(f"{where}: accept_hist has {len(line.accept_hist)} bins for block size {line.block_size}")
    elif line.runs:
        steps = sum(line.accept_hist)
        if steps == 0:
            out.append(f"{where}: no verify steps recorded for {line.runs} DSpark runs")
        elif not rel_close(line.tau, sum(k * n for k, n in enumerate(line.accept_hist)) / steps, tol):
            out.append(f"{where}: tau {line.tau:.4f} does not match its acceptance histogram")
    if line.tau > line.block_size:
        out.append(f"{where}: tau {line.tau:.3f} above the block size {line.block_size}")
    return out


def check_guard_line(line: GuardLine, cfg: IntegritySettings) -> list[str]:
    tol = cfg.tps_rel_tolerance
    out: list[str] = []
    for name in ("decode_tps_reps", "prefill_tps_reps"):
        n = len(getattr(line, name))
        if n != line.reps:
            out.append(f"guard {line.guard}: {name} has {n} entries for reps={line.reps}")
    if line.decode_tps_reps and not rel_close(line.decode_tps, median(line.decode_tps_reps), tol):
        out.append(f"implausible timings: guard {line.guard}: decode_tps is not the median of its reps")
    if line.prefill_tps_reps and not rel_close(line.prefill_tps, median(line.prefill_tps_reps), tol):
        out.append(f"implausible timings: guard {line.guard}: prefill_tps is not the median of its reps")
    return out


def claimed_decode_s(rec: RunRecord) -> float:
    """Seconds of decode a tau_check child says it spent (AR + every DSpark run, all contexts)."""
    return sum(line.ar_decode_s + sum(line.dspark_decode_s) for line in rec.tau_lines())


def check_record(rec: RunRecord, requested_reps: int, profile: str, cfg: IntegritySettings) -> list[Finding]:
    msgs: list[str] = []
    if rec.program == "tau_check":
        for line in rec.tau_lines():
            msgs += check_tau_line(line, requested_reps, profile, cfg)
        claimed = claimed_decode_s(rec)
        if claimed > rec.wall_s:
            msgs.append(
                f"implausible timings: claims {claimed:.3f} s of decode in a subprocess that ran {rec.wall_s:.3f} s"
            )
    elif rec.program == "guard":
        for line in rec.guard_lines():
            msgs += check_guard_line(line, cfg)
    return [Finding(ref=rec.ref, round=rec.round, message=m) for m in msgs]


def check_workload(records: Sequence[RunRecord]) -> list[Finding]:
    """Both refs, every round, measured the same prompts, contexts, model and guards."""
    findings: list[Finding] = []
    tau = [r for r in records if r.program == "tau_check"]
    guard = [r for r in records if r.program == "guard"]
    ref_tau = next((r for r in tau if r.ref == "base"), None)
    if ref_tau is not None:
        want = {
            line.context_key: (line.prompt_sha256, line.new_tokens, line.model_sha256, line.block_size)
            for line in ref_tau.tau_lines()
        }
        for rec in tau:
            got = {
                line.context_key: (line.prompt_sha256, line.new_tokens, line.model_sha256, line.block_size)
                for line in rec.tau_lines()
            }
            if set(got) != set(want):
                findings.append(Finding(ref=rec.ref, round=rec.round, kind="workload",
                                        message=f"measured contexts {sorted(got)} but main measured {sorted(want)}"))
                continue
            for key, value in got.items():
                if value != want[key]:
                    what = ("prompt", "new_tokens", "model", "block size")
                    diff = [w for w, a, b in zip(what, value, want[key]) if a != b]
                    findings.append(Finding(ref=rec.ref, round=rec.round, kind="workload",
                                            message=f"{key[0]}@{key[1]}: {', '.join(diff)} differ from main's run"))
    ref_guard = next((r for r in guard if r.ref == "base"), None)
    if ref_guard is not None:
        want_g = {line.guard: line.ctx for line in ref_guard.guard_lines()}
        for rec in guard:
            got_g = {line.guard: line.ctx for line in rec.guard_lines()}
            if got_g != want_g:
                findings.append(Finding(ref=rec.ref, round=rec.round, kind="workload",
                                        message=f"guards {sorted(got_g.items())} differ from main's {sorted(want_g.items())}"))
    return findings


def wallclock_cross_check(
    records: Sequence[RunRecord], cfg: IntegritySettings, wall_noise: float
) -> WallclockCheck:
    """Does a claimed decode saving show up in the parent's own stopwatch?

    Per round: claimed = main's claimed decode s - PR's; observed = main's wall s - PR's. Over the
    median round the observed saving must reach `min_fraction * claimed - slack`, where slack is
    the larger of the configured seconds and the box's calibrated wall noise. Only evaluated when
    the PR claims to be faster.
    """
    by_round: dict[int, dict[str, RunRecord]] = {}
    for rec in records:
        if rec.program == "tau_check" and rec.ok:
            by_round.setdefault(rec.round, {})[rec.ref] = rec
    claimed, observed, base_walls = [], [], []
    for pair in by_round.values():
        if "base" in pair and "head" in pair:
            claimed.append(claimed_decode_s(pair["base"]) - claimed_decode_s(pair["head"]))
            observed.append(pair["base"].wall_s - pair["head"].wall_s)
            base_walls.append(pair["base"].wall_s)
    if not claimed:
        return WallclockCheck(evaluated=False)
    claim, seen = median(claimed), median(observed)
    if claim <= 0:
        return WallclockCheck(evaluated=False, claimed_saving_s=claim, wall_saving_s=seen)
    slack = max(cfg.wallclock_slack_s, wall_noise * median(base_walls))
    required = cfg.wallclock_min_fraction * claim - slack
    return WallclockCheck(
        evaluated=True, claimed_saving_s=claim, wall_saving_s=seen, required_s=required, plausible=seen >= required
    )


def check_all(
    records: Sequence[RunRecord], requested_reps: int, profile: str, cfg: IntegritySettings, wall_noise: float
) -> IntegrityReport:
    findings: list[Finding] = []
    for rec in records:
        if rec.ok:
            findings += check_record(rec, requested_reps, profile, cfg)
    findings += check_workload([r for r in records if r.ok])
    wall = wallclock_cross_check(records, cfg, wall_noise)
    if wall.evaluated and not wall.plausible:
        findings.append(
            Finding(
                ref="head",
                message=(
                    f"implausible timings: the PR claims {wall.claimed_saving_s:.3f} s less decode per round, "
                    f"but its subprocess ran only {wall.wall_saving_s:.3f} s shorter "
                    f"(at least {wall.required_s:.3f} s expected)"
                ),
            )
        )
    return IntegrityReport(findings=findings, wallclock=wall)
