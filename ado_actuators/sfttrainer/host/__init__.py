"""What the host offers every process of ours, the trainer's too: the one atomic write of a
file (atomic.py), the Hugging Face hub cache's layout on disk (hf_cache.py) and a child's
death with its parent (pdeathsig.py). Imports no other layer: listed below
every layer that writes a file, so each may import it."""
