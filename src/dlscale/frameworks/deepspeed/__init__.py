"""DeepSpeed's ZeRO engines (deepspeed-zero1, -zero2, -zero3) on PyTorch's engine."""
