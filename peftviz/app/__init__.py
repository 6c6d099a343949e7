"""What the app's pages share: cached access to the store, the job queue and its child-process worker, the
shared-server policy, the Tour."""
