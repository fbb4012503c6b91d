"""MXNet: Gluon models trained through a KVStore (local, dist_sync, dist_async)."""
