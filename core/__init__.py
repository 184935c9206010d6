"""The science: environments, policies, kernels, networks and the trial loop, in four rooms by subject.

- ``core.engine``: the trial engine, what every trial runs whichever paper it serves: the contracts of
  a policy and an environment, the trial and its lockstep batches, the one round loop, the registry of
  names, seeding, the checkpoint format and its declarations, the tie rule. Imports no other room.
- ``core.baselines``: what neither paper owns: the linear baselines (LinUCB, LinTS, LinRBMLE) and the
  synthetic bandit. Imports the engine only.
- ``core.neural``: the NeuralRBMLE paper: networks, their optimiser, Z, likelihoods, datasets, the
  classification bandit and the neural algorithms. Imports the engine (and baselines), never the kernel room.
- ``core.kernel``: the adversarial kernelized bandits paper: kernels, domains, Exp3, MVR, Nystrom, the
  adversarial and lower-bound environments, its algorithms with Random, and one trial over shards
  (``core.kernel.sharded``). Imports the engine (and baselines), never the neural room.

numpy, scipy and torch for the math (pyarrow only to read dataset files, in ``core.neural.datasets``);
no Ray, no MLflow, no result files. Importing a room imports none of its modules.
"""
