"""The science: environments, policies, kernels, networks and the trial loop.

Pure numpy/scipy/torch; no Ray, no MLflow, no result files (dataset files are read here).
"""
