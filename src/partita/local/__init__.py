"""Running partita on this machine: etcd and brokers as child processes, for tests,
demos and the main job."""
