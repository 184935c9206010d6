"""The science: environments, policies, kernels, networks and the trial loop.

numpy, scipy and torch for the math (pyarrow only to read dataset files, in ``core.neural.datasets``); no Ray,
no MLflow, no result files.
"""
