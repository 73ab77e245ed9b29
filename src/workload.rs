//! Pod controllers: the pod a Deployment, Job, CronJob... would create.
