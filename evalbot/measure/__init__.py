"""Where measuring happens: git (gitops: refs, the merge candidate), checkout + harness overlay
(checkout), the corpora and the windows cut from them (corpus, windows), the harness servers in their
sandboxes (servers, proc, sandbox) and the bot's side of their protocol (client), the campaign that
times every request with the bot's clock while the others are frozen (plan, campaign, run,
gpu_contention), and the box itself (device, hardening, progress). It produces
`evalbot.decide.records.Records`; it decides nothing.
"""
