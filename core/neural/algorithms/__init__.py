"""The NeuralRBMLE paper's algorithms, one module per algorithm on the shared base ``neural_base``
(registry names in ``core.engine.registry``)."""
