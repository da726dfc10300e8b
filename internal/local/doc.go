// Package local is the root of the local-only code, which nothing deployed
// imports (its test checks that):
//
//   - localrun: the local runtime (make dev, the integration tests): every
//     function's handler in one process against an AWS emulator
//   - gateway: API Gateway's REST proxy integration, in front of the api
//     function's handler
//   - esm: Lambda's SQS event-source mapping, polling the emulator's queues
//   - firer: EventBridge Scheduler firing the emulator's schedules
//   - emulator: the AWS endpoint (moto's server, or AWS_ENDPOINT_URL)
//   - deployed: a stack CloudFormation deployed (make deploy-emulator), read
//     back so the local runtime can run on its resources
package local
