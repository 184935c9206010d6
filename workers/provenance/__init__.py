"""The code behind a result: the digest of the code a trial runs on and the machine it ran on
(``code_identity``, ``runtime``), finished trials against today's code (``code_check``), and ``verify``'s
sample, comparison and acceptance (``verification``)."""
