"""The performance model: what each collective costs (:mod:`.costs`) on a network of one level
or two (:mod:`.links`), each synchronization pattern as one record of them (:mod:`.patterns`),
the network's costs fitted from measured times (:mod:`.fit`), a step's time, throughput, speedup
and efficiency predicted for any number of workers (:mod:`.predict`), and the same records
against measured points (:mod:`.validate`, :mod:`.trust`).

Framework-free: numpy only. docs/perfmodel.md says what the model assumes and where it misses.
"""
