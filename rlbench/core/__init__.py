"""The ground floor: errors and exit codes, option declarations and what-if parsing, devices, child processes.

Nothing here imports another part of rlbench, torch or pandas at import time.
"""
