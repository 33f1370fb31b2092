"""The webhook service (`evalbot serve`): a Starlette app under uvicorn that verifies, validates,
dedupes and queues (app, signature, payloads, routing, server). Nothing slow happens here."""
