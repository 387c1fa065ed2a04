"""Recording a forward pass: hooks, per-thread records, copies to the host, ablation."""
