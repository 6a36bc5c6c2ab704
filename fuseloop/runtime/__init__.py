"""Devices, contexts, queues, buffers and kernel launches."""
