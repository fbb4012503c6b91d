"""The performance model: what a synchronization costs on a network (:mod:`.costs`), the
network's costs fitted from measured times (:mod:`.fit`), and a step's time, throughput,
speedup and efficiency predicted for any number of workers (:mod:`.predict`).

Framework-free: numpy only. docs/perfmodel.md says what the model assumes and where it misses.
"""
