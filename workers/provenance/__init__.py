"""The code behind a result: the digest of the code a trial runs on and the machine it ran on
(``code_identity``, with ``source_index`` reading the statements; ``runtime``), finished trials against
today's code (``code_check``), ``verify``'s sample, comparison and acceptance (``verification``), and the
classes registered in the driver that travel with a sweep to its workers, with their source (``shipped``)."""
