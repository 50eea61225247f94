"""The GPU cost model of scripts/gpu_model.py (the command line), one job per module:

- params: the model shape, device figures, assumptions (DEFAULTS) and the small runs;
- analytic: the counters of one decode step read off the launch code;
- categories: kernel families and the flat form of a run's counters;
- runs, checkpoint, collect: the small runs, their checkpoints, running them (`--collect`);
- fit: the exact linear fit of the counters and its held-out checks;
- cpu_attn: the host attention measurement, scaled to the server;
- timing: counters to a step time, the hybrid step layer by layer, the largest batch;
- report, doc_*, before_after: the document (docs/gpu-model.md).

Standard library only.
"""
