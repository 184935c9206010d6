"""The results folder, the record of truth: the only room that spells a result path (``paths``,
whose ``SweepFolder`` every other room asks), and within it ``untrusted_files``, the one place that
opens files this process did not write.

``store`` (the folder: writing groups of outcomes, compaction, the check of every file, reading),
the formats of its parts (``journal``, ``curves``, ``trials_table``; the typed ``record``), the
folder's records as strict models (``strict_models``), files named by their checksum
(``checksums``) and written whole (``atomic``), what cannot be used moved aside (``set_aside``), do
the parts agree (``consistency``), in-trial checkpoints (``checkpoint_files``), a running sweep's
``running.json`` (``live_run``), each run's ``--set`` (``run_notes``), the results root's own
entries (``root_entries``), folders the user names (``writable_folders``), and what the commands
ask of a store (``resume``, ``status_counts``).
"""
