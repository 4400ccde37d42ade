"""A module whose import takes two minutes: a zygote preloading it stays "starting" that long
(tests/runners/test_warm_pool.py stops a pool meanwhile)."""

import time

time.sleep(120)
