"""Where measuring happens: git (gitops), checkout + harness overlay (checkout), the harness runs in
scrubbed, sandboxed, timed subprocesses (environment, sandbox, process, harness_runner), main's
engine re-verifying the PR's streams (reverifier), and the box itself (device, hardening, progress).
It produces `evalbot.decide.records.RunRecord`s; it decides nothing.
"""
