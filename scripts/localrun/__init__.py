"""`make local`: run the chart's rendered pods as local processes, as a kubelet would.

podspec  rendered StatefulSet -> one LocalPod per replica (pure)
network  per-pod network namespaces + hosts files (root), or a loopback port mapping
cluster  start/restart/stop the pods, stream their logs, detect completion
"""
