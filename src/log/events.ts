// The stable event names the service logs (field `event`). Operators alert on these; renaming one
// is a breaking change. README's table of events lists exactly these (test/unit/log-events.test.ts).
export const EVENTS = Object.freeze({
  serviceReady: 'service.ready',
  serviceStopping: 'service.stopping',
  serviceStopped: 'service.stopped',
  /** shutdown is waiting: what for (workers, SMTP sessions, deliveries in flight) */
  serviceWaiting: 'service.waiting',
  authDisabled: 'auth.disabled',
  authRefused: 'auth.refused',
  configEffective: 'config.effective',
  httpRequest: 'http.request',
  databaseDevDefault: 'database.dev_default',
  databaseUnavailable: 'database.unavailable',
  databaseReconnected: 'database.reconnected',
  workerExited: 'worker.exited',
  serverListening: 'server.listening',
  routingChangeUnacknowledged: 'routing.change_unacknowledged',
  smtpAccepted: 'smtp.accepted',
  smtpRejected: 'smtp.rejected',
  smtpStoreFailed: 'smtp.store_failed',
  /** a transition the lifecycle tables do not allow: a programming error; the message goes to dlq */
  lifecycleInvalidTransition: 'lifecycle.invalid_transition',
  deliverySucceeded: 'delivery.succeeded',
  deliveryFailed: 'delivery.failed',
  deliveryDeadLettered: 'delivery.dlq',
  leaseTakenOver: 'lease.taken_over',
  /** a message's actor found its lease taken by another owner and stopped (a normal race) */
  leaseLost: 'lease.lost',
  /** a message's actor failed unexpectedly; the message is released for another try */
  actorFailed: 'actor.failed',
  /** an endpoint paused (by the breaker after consecutive failures, or by an operator) */
  endpointPaused: 'endpoint.paused',
  /** a paused endpoint resumed (a probe succeeded, or an operator) */
  endpointResumed: 'endpoint.resumed',
  /** a delivery went to dlq while its endpoint was failing or paused */
  endpointDeadLettered: 'endpoint.dead_lettered',
  /** an attempt's outcome could not be written to its endpoint's health (the database) */
  endpointRecordFailed: 'endpoint.record_failed',
  messagesRequeued: 'messages.requeued',
  housekeepingDone: 'housekeeping.done',
  housekeepingFailed: 'housekeeping.failed',
} as const);
