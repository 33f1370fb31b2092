"""Where the decision happens: pure functions over plain data (records in, verdict out).

contract (harness output lines) -> records (one run each) -> integrity (anti-forgery) -> measurements
-> gates -> tiers -> verdict -> outcome; calibration (A/A noise floor), stats, noise, reverify
(the hook), automerge (which PR of a round merges). No git, no subprocess, no forge, no HTTP.
"""
