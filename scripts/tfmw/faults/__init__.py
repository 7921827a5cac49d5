"""The fault harness: kill, hang, cut off or delete a worker mid-training and measure what it
costs (`python -m tfmw.faults`; its help has the scenarios).

analysis    what a run's logs say: FaultResult, detection, resume, recovery parts (pure)
local       the faults on `make local`'s runner
kube        the harness's client of a cluster: helm and the API server against one kubeconfig
podlogs     every pod incarnation's log followed through the API server, and what its lines say
faultedrun  the one faulted run on a cluster (the chart's and the peers')
inject      the faults done to a pod on a cluster (delete, kill the trainer, disrupt, node faults)
cluster     the chart's run on a Kubernetes cluster, installed with helm
tables      the results as tables
"""
