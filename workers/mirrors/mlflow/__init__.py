"""The MLflow mirror: the only room that imports ``mlflow`` (and only inside ``sink``, ``bulk`` and
``cells``: ``tracking_store``, which checks a tracking URI for the CLI, stays light).

``sink`` (the MLflow sink), ``bulk`` (runs written to a SQLite store in transactions), ``cells``
(one run per cell), ``tracking_store`` (which MLflow store, its URI checked, a local store's set-up).
"""
