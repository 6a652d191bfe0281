"""One measurement without ado: `measurement.measure(entity, experiment, settings)` resolves and
validates one request, skips without launching what needs no launch, and hands the rest to
execute/; the settings it reads (settings.py). Any front end (ado's actuator, the GPU kit, a
script) calls it, and space/ asks it to resolve each configuration of a space; it imports
neither ado-core nor Ray."""
