"""When training stops: the stop methods, one module each, as one plug-in axis.

Each method module knows both halves of its method: the policy that decides, at each step end
inside the rank, whether training stops (a pure state machine fed with step timings), and the
seconds it is expected to train for a predicted step time (what a space's bill asks before
anything runs). policy.py says what a policy answers and method.py what a method offers;
methods.py names the methods an entity's `auto_stop_method` may take and builds the policy a job
asks for; racing.py says whether a run has already lost its answer group to a measured
incumbent (issue 54), a decision any method's policy can add to its own. Standard library,
stats/ and contract/ only: no torch (the collectives that make ranks agree stay in
trainer/stopping.py), so catalog/, space/ and the trainer all import it."""
