"""The history of every scoring and calibration, for the dashboard and /metrics.

`schema` holds the small stable model (`HistoryEntry`, `CellFigures`) that the store and the
dashboard read; `adapter` is the one place that turns the measurement's own data model
(`ScoreOutcome`, `NoiseFloor`) into it; `store` keeps entries in SQLite (one box, the default) or in
the same Redis as the queue (many boxes).
"""
