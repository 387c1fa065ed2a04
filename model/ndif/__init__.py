"""Models NDIF (the National Deep Inference Fabric) hosts, run there through nnsight with the app's own hooks
(`aa.load(model, backend="ndif")`; docs/serving.md). nnsight is imported only when such a model is opened."""
