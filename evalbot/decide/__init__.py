"""Where the decision happens: pure functions over plain data (records in, verdict out).

records (what a campaign measured) -> integrity (what the processes sent, held to the contract) ->
accuracy (full-vocabulary KL from both refs' log-probs) -> measurements -> gates -> tiers -> verdict
-> outcome; stopping (when more rounds cannot change the verdict), calibration (A/A noise floor),
stats, noise, automerge (which PR of a round merges). No git, no subprocess, no forge, no HTTP.
"""
