"""The NeuralRBMLE paper's room (SPEC 1): neural contextual bandits on classification data.

The network of eq. (2), stacked over arms and trials with its block-sparse first layer (``networks``);
the batched optimiser every neural method trains with (``training``) and NeuralRBMLE's surrogate
log-likelihoods (``likelihoods``); the gradient-feature matrix Z of the exploration bonuses
(``z_matrix``); the datasets' catalogue, reading and preprocessing (``datasets``) and the
classification bandit built on them (``classification``); and in ``algorithms/`` the neural methods
(NeuralRBMLE-GA and -PC, NeuralUCB, NeuralTS, DeepFPL, BootstrappedNN, neural epsilon-greedy) on their
shared base (``neural_base``). It imports core.engine (core.baselines if it ever needs a baseline's
code), torch, numpy and pyarrow to read dataset files; never core.kernel.
"""
