"""Where the GitHub side happens: the webhook service (webhook/), comment commands (commands), the
durable queue and ledger (jobs/), and the worker that scores and publishes (worker/)."""
