"""The fault harness: kill, hang, cut off or delete a worker mid-training and measure what it
costs (`python -m tfmw.faults`; its help has the scenarios).

analysis    what a run's logs say: FaultResult, detection, resume, recovery parts (pure)
local       the faults on `make local`'s runner
cluster     the faults on a Kubernetes cluster, through helm and the API server
tables      the results as tables
"""
