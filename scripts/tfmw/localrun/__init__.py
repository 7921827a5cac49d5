"""`make local`: run the chart's rendered pods as local processes, as a kubelet would.

podspec   rendered StatefulSet -> one LocalPod per replica (pure)
network   per-pod network namespaces + hosts files (root), or a loopback port mapping
kubelet   start/restart/stop the pods (restartPolicy: Always), stream their logs, tell the run's end
proctree  a pod's process tree (what its container's PID namespace would hold), to signal it whole
"""
