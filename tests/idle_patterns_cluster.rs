//! Keep-alive sleeps and too-frequent CronJobs in the forms a manifest
//! writes them, through the shipped webhook configurations: warned, never
//! denied; short sleeps of retry loops and hourly schedules pass quietly.
use crate::common;

use common::webhooks::{Cluster, Review};
use serde_json::{json, Value};

fn gpu_pod(command: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "notebook", "namespace": "ml"},
        "spec": {"containers": [{
            "name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": command,
            "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"}}
        }]}
    })
}

fn gpu_cronjob(schedule: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "gpu-probe", "namespace": "ml"},
        "spec": {"schedule": schedule, "jobTemplate": {"spec": {
            "activeDeadlineSeconds": 600,
            "template": {"spec": {"restartPolicy": "OnFailure", "containers": [{
                "name": "probe", "image": "nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04",
                "command": ["nvidia-smi"],
                "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"}}
            }]}}
        }}}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_sleeps_and_frequent_cronjobs_are_warned() {
    let cluster = Cluster::start().await;
    for command in [
        json!(["sleep", "Infinity"]),
        json!(["sh", "-c", "sleep 600m"]),
        json!(["sleep", "1e9"]),
        json!(["sh", "-c", "nvidia-smi && sleep 2d"]),
        json!(["sleep", "1", "inf"]),
    ] {
        let outcome = cluster
            .admit(&Review::create(gpu_pod(command.clone())))
            .await;
        assert!(outcome.allowed, "{command}: {}", outcome.message());
        assert_eq!(
            outcome.warnings.len(),
            1,
            "{command}: {:?}",
            outcome.warnings
        );
        assert!(
            outcome.warnings[0].starts_with("gpu-keep-alive: container main keeps itself alive"),
            "{command}: {:?}",
            outcome.warnings
        );
    }
    for command in [
        json!([
            "sh",
            "-c",
            "until nvidia-smi; do sleep 5; done; python serve.py"
        ]),
        json!([
            "sh",
            "-c",
            "for i in 1 2 3; do python fetch.py && break; sleep 30s; done"
        ]),
        json!(["sh", "-c", "sleep 60 && python train.py"]),
    ] {
        let outcome = cluster
            .admit(&Review::create(gpu_pod(command.clone())))
            .await;
        assert!(outcome.allowed, "{command}: {}", outcome.message());
        assert!(
            outcome.warnings.is_empty(),
            "{command}: {:?}",
            outcome.warnings
        );
    }

    for schedule in [
        "@every 1m",
        "* * * * *",
        "0-59 * * * *",
        "*/1 * * * *",
        "0/1 * * * *",
    ] {
        let outcome = cluster.admit(&Review::create(gpu_cronjob(schedule))).await;
        assert_eq!(outcome.validated_by, ["cronjobs.validate.gpu-admission.io"]);
        assert!(outcome.allowed, "{schedule}: {}", outcome.message());
        assert_eq!(
            outcome.warnings.len(),
            1,
            "{schedule}: {:?}",
            outcome.warnings
        );
        assert!(
            outcome.warnings[0].starts_with(
                "gpu-cronjob-frequency: CronJob gpu-probe uses GPUs and runs more often than every 5 minutes"
            ),
            "{schedule}: {:?}",
            outcome.warnings
        );
    }
    for schedule in ["@hourly", "@every 5m", "*/5 * * * *"] {
        let outcome = cluster.admit(&Review::create(gpu_cronjob(schedule))).await;
        assert!(outcome.allowed, "{schedule}: {}", outcome.message());
        assert!(
            outcome.warnings.is_empty(),
            "{schedule}: {:?}",
            outcome.warnings
        );
    }
    cluster.stop().await;
}
