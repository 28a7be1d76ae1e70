// The stable event names the service logs (field `event`). Operators alert on these; renaming one
// is a breaking change.
export const EVENTS = Object.freeze({
  serviceReady: 'service.ready',
  serviceStopping: 'service.stopping',
  serviceStopped: 'service.stopped',
  configInvalid: 'config.invalid',
  authDisabled: 'auth.disabled',
  databaseDevDefault: 'database.dev_default',
  databaseUnavailable: 'database.unavailable',
  databaseReconnected: 'database.reconnected',
  workerExited: 'worker.exited',
  workerStarted: 'worker.started',
  smtpAccepted: 'smtp.accepted',
  smtpRejected: 'smtp.rejected',
  smtpStoreFailed: 'smtp.store_failed',
  messageTransition: 'message.transition',
  deliverySucceeded: 'delivery.succeeded',
  deliveryFailed: 'delivery.failed',
  deliveryDeadLettered: 'delivery.dlq',
  leaseTakenOver: 'lease.taken_over',
  housekeepingDone: 'housekeeping.done',
  housekeepingFailed: 'housekeeping.failed',
} as const);
