"""assay_bench: measuring training-step throughput against peers and the GEMM ceiling.

``step`` times interleaved optimizer steps and the same-session GEMM rate, ``profile`` sums
torch.profiler events into categories, ``subjects`` builds assay and its peers from one GGUF,
``report`` runs it all and assembles the result. The FLOP model is ``assay.model.flops``.
"""
