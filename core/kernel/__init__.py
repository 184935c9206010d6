"""The adversarial kernelized bandits paper's room (SPEC 2-4): Exp3 over the finite domain X of a kernel.

Kernels and the growth rate gamma_T (``kernels``); the domains X of the paper's settings (``domains``);
the Exp3 machinery its algorithms share: exponential weights, step-size schedules, the G-optimal design,
the draw of x_t (``exp3``); maximum variance reduction (``mvr``) and ridge-leverage Nystrom sampling
(``nystrom``); the adaptive adversary's bandit and the lower-bound instance (``adversarial_kernel``,
``kernel_lower_bound``); in ``algorithms/`` Kernelized Exp3, RLS-Kernelized Exp3, APG-Exp3 and Random
(the baseline of SPEC 3.6, here because it has a sharded half); and in ``sharded/`` one trial with X
split over shards (SPEC 4), with the halves of the algorithms that can be sharded defined beside them.
It imports core.engine (core.baselines if it ever needs a baseline's code), numpy, scipy and torch;
never core.neural.
"""
