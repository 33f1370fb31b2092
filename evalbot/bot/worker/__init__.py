"""`evalbot worker`: takes jobs off the queue, scores them one at a time per box, publishes.

Life of a score job: claim in the ledger (under the box lock) -> check it is still fresh -> check
run in progress -> score -> verdict stored in the ledger (`scored`, as JSON) -> publish -> `done` ->
maybe decide the automerge round. A failure to publish leaves the verdict in the ledger; the sweeper
publishes it later. A worker that dies leaves a `running` job that recovery puts back in the queue.

- `worker`: the Worker (score jobs, publication, sweeping)   - `rounds`: automerge rounds
- `chores`: light work (check runs, replies, toggles, rescore, main moved)
- `heartbeat`, `sweeper`: the two background threads          - `progress`: check-run progress
- `scoring`: the default scorer and publisher (evalbot.pipeline) and loading others by name
- `github`: PyGithub forges per repository                    - `secrets`: scrubbing the environment
- `main`: the process (composition root, `evalbot worker` arguments)
"""
