"""Timestamped progress lines (flushed: a training run is followed live)."""
import time


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)
