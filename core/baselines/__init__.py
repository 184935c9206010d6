"""What neither paper owns: the linear baselines and the synthetic bandit.

LinUCB, LinTS and LinRBMLE, three indices over one ridge statistic (``linear``; the NeuralRBMLE paper
compares against them, SPEC 1.5, and so may any contextual sweep), and the synthetic contextual bandit
of the NeuralUCB paper that the quick-start sweep runs without a download (``synthetic``). It imports
core.engine, numpy and pydantic only: a baseline that needs a paper's machinery lives in that paper's room
(Random, whose sharded half is the kernel paper's, is in core.kernel).
"""
