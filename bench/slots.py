"""The slot schedule of `arcal run` (jobs taken in order by the first free slot), shared by
bench_train.py and bench_study.py so that neither imports the other."""


def slot_makespan(durations, slots=2):
    """Makespan of jobs taken in order by the first free of `slots` slots (arcal run's scheduler)."""
    free = [0.0] * slots
    for d in durations:
        i = free.index(min(free))
        free[i] += d
    return max(free)
