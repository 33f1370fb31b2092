"""The webhook service (`evalbot serve`): a Starlette app under uvicorn. See app.py."""
