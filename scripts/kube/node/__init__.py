"""The local cluster's node agent: a kubelet for pods that run as host processes (agent.py)."""
