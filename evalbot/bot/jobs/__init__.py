"""Queued work: the job model, the durable ledger, the box lock and the huey queue around them.

webhook ─▶ JobQueue.submit(...) ─▶ ledger (queued) + huey message ─▶ worker claims ─▶ running ─▶
scored (verdict kept) ─▶ done. See docs/deploy.md for why huey and how nothing is lost.
"""
