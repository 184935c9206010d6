"""Execution on Ray: the only room that imports ``ray``.

The driver's sweep loop (``dispatcher``), the lockstep batches it hands out (``batches``), its writer
of outcomes (``result_writer``: durable first, then the mirror) and its pool of trial actors (``pool``, ``actors``), the
Ray it connects to (``ray_connection``, ``ray_address``), sharded trials' shard actors
(``sharded_trials``), the trial actor's device and threads (``trial_setup``), the driver's dataset files
for nodes that lack them (``shipped_datasets``), stopping on a signal
(``signals``), and the values a run is given and gives back (``run_values``).
"""
