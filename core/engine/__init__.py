"""The trial engine: what every trial runs, whatever its algorithm and whichever paper it serves.

What a policy and an environment implement (``contracts``); a trial's content and its lockstep batch
(``trial``: ``TrialSpec``, ``TrialRun``, ``run_trials``); the one round loop with its checks, results and
checkpoint driver (``round_loop``); the names of algorithms, environments and sinks (``registry``); the
random streams (``seeding``); canonical JSON (``canonical``); a trial's memory estimate (``memory``); the
checkpoint format and what a class declares it saves (``state_codec``, ``state_declaration``); and the tie
rule of an argmax that rounding must not decide (``ties``). It imports numpy and scipy (torch only where a
state holds tensors) and no other room of core: the papers' rooms (``core.neural``, ``core.kernel``) and
``core.baselines`` build on it, and the registry names their classes by "module:Class" strings, never
by import.
"""
