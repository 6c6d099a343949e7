"""What fixes a method's miscalibration, and at what cost: uncertainty methods over any stored run or group.

Each uncertainty method turns a group of seeds (`store.runs.Group`) into *members*: predictors whose
validation and test probabilities every estimator, interval and paired test of `analysis.group_stats`
reads like a run's own (`derived.UncertainRun`).

    temperature   post-hoc: one T fitted on the best epoch's validation, softmax(log p / T)   temperature.py
    ensemble      k seeds' stored predictions averaged (probabilities or logits); no training  ensemble.py
    mc-dropout    T stochastic forward passes, every dropout the run trained with on           mc_dropout.py
    laplace       a Laplace approximation with laplace-torch (last layer), GLM predictive      laplace.py

The field's libraries do the Bayesian work where they exist (laplace-torch's posterior and predictive;
MonteCLoRA is a method, `methods.monteclora`, trained through peft's own `monteclora_config`); peftviz
adds the common footing: every method on every PEFT method, its predictions cached once in the run
folder (`cache`), the intervals over seeds and test documents and the paired difference to the plain
method (`comparison`), and the cost of every number (forward passes, extra parameters, measured seconds).

NAMES are the registered uncertainty methods, in the order tables show them; `registry.method(name)` loads
one (torch only where it needs a model), so `report --help` stays light; so do the constants here, which the command line reads.
"""

NAMES = ("temperature", "ensemble", "mc-dropout", "laplace")
# what the comparison reports by default: two calibration errors, the two proper scores, and what selective
# prediction loses
METRICS = ("ece", "smooth_ece", "nll", "brier", "aurc")
MAX_PASSES = 1000  # T, samples, ensemble size: the 10-100 of the literature, with room; each pass is a forward pass
