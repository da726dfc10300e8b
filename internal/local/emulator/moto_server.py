"""moto_server with DynamoDB's isolation and fast answers, and CloudFormation
able to deploy the stack that `make synth` writes.

moto runs requests on threads, and its TransactWriteItems backs up whole
tables, applies the writes and, when a condition fails, puts the backups
back: a write made by another request in between is lost, and a reader can
see a half-applied transaction. DynamoDB itself isolates transactions from
every other read and write. This wrapper restores that by running the
DynamoDB backend's operations one at a time, and with that backs up only
the items a transaction names, not its tables (whose copies made a
transaction's time grow with the table).

DynamoDB's answers are written with json.dumps (moto's serializer walks
botocore's model for every attribute of every item: a Query of 72 items
took a quarter of a second or more).

A ranged GetObject reads only its range out of the object (moto reads the
whole object, then slices it).

The second half (deploy_patches, for `make deploy-emulator` and
localstack/deploy_test.go) fills the gaps in moto's CloudFormation that stop
`cdk deploy` of the unmodified template; each patch says what it works
around. They are written against moto MOTO_VERSION and applied only to it.

Everything else is moto as shipped. Arguments are moto_server's
(-H HOST -p PORT).
"""
import copy
import functools
import secrets
import string
import sys
import threading

import moto
import moto.dynamodb.models as _ddb_models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.server import main

_lock = threading.RLock()

OPERATIONS = [
    "put_item", "get_item", "update_item", "delete_item", "query", "scan",
    "batch_get_item", "batch_write_item", "transact_write_items",
    "transact_get_items", "execute_statement", "execute_transaction",
    "batch_execute_statement", "create_table", "delete_table", "update_table",
]


def _isolated(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _lock:
            return fn(*args, **kwargs)
    return wrapper


for _name in OPERATIONS:
    setattr(DynamoDBBackend, _name, _isolated(getattr(DynamoDBBackend, _name)))


# moto's TransactWriteItems backs up every table it names, whole, once per
# item of the transaction, to put them back when a condition fails: its
# time grows with the tables (200 ten-row batches one after another made
# their commits several times slower at the end of the run than at its
# start), which DynamoDB's does not. Under the lock above nothing else
# reads or writes meanwhile, so a copy of the items the transaction names
# is backup enough: moto's copies of the tables are made no more (moto
# puts back the very table it holds, a no-op), and a cancelled
# transaction puts those items back as they were.
class _TablesNotCopied:
    """moto.dynamodb.models' copy module, with deepcopy of a Table the table."""

    def __getattr__(self, name):
        return getattr(copy, name)

    @staticmethod
    def deepcopy(x, memo=None):
        return x if isinstance(x, Table) else copy.deepcopy(x, memo)


_ddb_models.copy = _TablesNotCopied()


def _named_items(backend, transact_items):
    """The items a transaction names, copied as they are now."""
    saved = []
    for entry in transact_items:
        try:
            _, op = next(iter(entry.items()))
            table = backend.tables[op["TableName"]]
            attrs = op["Key"] if "Key" in op else op["Item"]
            hash_key = DynamoType(attrs[table.hash_key_attr])
            range_key = DynamoType(attrs[table.range_key_attr]) if table.range_key_attr else None
            item = table.get_item(hash_key, range_key)
        except Exception:  # a malformed entry: moto refuses the request itself
            continue
        saved.append((table, hash_key, range_key, copy.deepcopy(item)))
    return saved


def _put_back(table, hash_key, range_key, item):
    """Make the item at hash_key/range_key of table item again (None: none)."""
    if range_key is None:
        if item is None:
            table.items.pop(hash_key, None)
        else:
            table.items[hash_key] = item
    elif item is None:
        table.items.get(hash_key, {}).pop(range_key, None)
    else:
        table.items[hash_key][range_key] = item


_transact_write_items = DynamoDBBackend.transact_write_items


@functools.wraps(_transact_write_items)
def _transact_backing_up_items(self, transact_items):
    with _lock:
        saved = _named_items(self, transact_items)
        try:
            return _transact_write_items(self, transact_items)
        except Exception:
            for table, hash_key, range_key, item in reversed(saved):
                _put_back(table, hash_key, range_key, item)
            raise


DynamoDBBackend.transact_write_items = _transact_backing_up_items


# moto 5 answers DynamoDB through a serializer that walks botocore's model
# for every attribute of every item: a Query of a batch's 72 chunk items
# cost 0.25-0.6 s of the emulator's one Python thread, with every other
# DynamoDB call waiting behind it (the lock above), where DynamoDB answers
# in milliseconds. moto's DynamoDB results (DynamoResult) are the wire
# format already (dynamo_to_dict: attribute values as {"S": ...}, numbers
# as strings), so they are answered with json.dumps of the members the
# operation's model has; one json cannot dump
# (bytes, a datetime) goes through moto's serializer. With
# RELAY_EMULATOR_CHECK_JSON set, each answer is made both ways and a
# difference is printed (how this was checked against the test suite).
import json
import os
from moto.dynamodb.responses import DynamoResult

_dynamo_execute = DynamoResult.execute_result
_check_json = bool(os.environ.get("RELAY_EMULATOR_CHECK_JSON"))


def _dynamo_execute_fast(self, context):
    result, shape = self.result, context.operation_model.output_shape
    if isinstance(result, dict) and shape is not None:
        # moto's results hold a member or two the model does not (DeleteItem's
        # ConsumedCapacityUnits), which its serializer leaves out.
        result = {k: v for k, v in result.items() if k in shape.members}
    try:
        body = json.dumps(result, separators=(",", ":"))
    except (TypeError, ValueError):
        return _dynamo_execute(self, context)
    fast = 200, {"Content-Type": "application/x-amz-json-1.0"}, body
    if _check_json:
        status, headers, slow = _dynamo_execute(self, context)
        if (status, headers) != fast[:2] or json.loads(slow or "{}") != json.loads(body):
            print(f"moto_server.py: fast JSON differs for {context.operation_model.name}: {status} {headers} {slow[:300]!r} vs {body[:300]!r}",
                  file=sys.stderr, flush=True)
    return fast


DynamoResult.execute_result = _dynamo_execute_fast


# moto answers a ranged GET by reading the whole object out of its buffer
# (a temporary file past 5 MB) and slicing the range from the copy: each
# 2 MB chunk an executor reads of a 200 MB input cost a 200 MB read, and
# the 167 such reads of the large benchmark most of the emulator's CPU,
# on the cores the service runs on. S3 reads the range alone; so does
# this: while a GET with one "bytes=first-[last]" range runs, a key's
# value is a window onto its buffer whose slice reads only the range, and
# what moto then answers with anything but that slice (it takes such a
# range whole when it is beyond the object) gets the whole value.
import re
import moto.s3.models as _s3_models
from moto.s3.responses import S3Response

_one_range = re.compile(r"bytes=\d+-\d*")
_ranged_get = threading.local()


class _Window:
    """A key's bytes as moto's range handling reads them: their length,
    and a slice read from the key's buffer alone."""

    def __init__(self, key):
        self.key = key

    def __len__(self):
        return self.key.size

    def __getitem__(self, s):
        with self.key.lock:
            self.key._value_buffer.seek(s.start)
            return self.key._value_buffer.read(max(s.stop - s.start, 0))

    def whole(self):
        return _key_value.fget(self.key)


_key_value = _s3_models.FakeKey.value


def _value(key):
    return _Window(key) if getattr(_ranged_get, "on", False) else _key_value.fget(key)


_s3_models.FakeKey.value = property(_value, _key_value.fset)
_key_response = S3Response.key_response


@functools.wraps(_key_response)
def _key_response_reading_ranges(self, request, full_url, headers):
    _ranged_get.on = request.method == "GET" and bool(_one_range.fullmatch(request.headers.get("range") or ""))
    try:
        status, response_headers, body = _key_response(self, request, full_url, headers)
    finally:
        _ranged_get.on = False
    if isinstance(body, _Window):
        body = body.whole()
    return status, response_headers, body


S3Response.key_response = _key_response_reading_ranges


MOTO_VERSION = "5.2.1"
_models = []


def deploy_patches():
    """Patch moto MOTO_VERSION so CloudFormation deploys the relay stack."""
    from moto.apigateway.models import Method, apigateway_backends
    from moto.awslambda.models import LambdaBackend
    from moto.cloudwatch.models import cloudwatch_backends
    from moto.core.common_models import CloudFormationModel
    from moto.scheduler.models import scheduler_backends
    from moto.secretsmanager.models import secretsmanager_backends
    from moto.sqs.models import sqs_backends

    # moto's AWS::ApiGateway::Method reads Integration.IntegrationHttpMethod
    # and Integration.Uri unconditionally: the MOCK integrations CDK writes
    # for CORS preflight (OPTIONS) have neither, and the deploy fails with a
    # KeyError. AWS requires them only for HTTP and AWS integrations.
    method_create = Method.create_from_cloudformation_json.__func__

    def create_method(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        integration = cloudformation_json["Properties"].get("Integration")
        if integration is not None:
            integration.setdefault("IntegrationHttpMethod", None)
            integration.setdefault("Uri", None)
        return method_create(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)

    Method.create_from_cloudformation_json = classmethod(create_method)

    # moto delivers an SQS message to a mapped function inside SendMessage:
    # it receives the queue's messages (counting a receive against
    # maxReceiveCount) and invokes the function in Docker, which is not
    # here, then makes them visible again. Lambda polls instead; on this
    # emulator the local runtime's pollers (internal/local/esm) play its
    # part. So the mapping is kept (ListEventSourceMappings shows it) but
    # not attached to the queue.
    esm_create = LambdaBackend.create_event_source_mapping

    def create_event_source_mapping(self, spec):
        esm = esm_create(self, spec)
        for queue in sqs_backends[self.account_id][self.region_name].queues.values():
            queue.lambda_event_source_mappings.pop(esm.function_arn, None)
        return esm

    LambdaBackend.create_event_source_mapping = create_event_source_mapping

    # moto's CloudFormation skips resource types it has no model for (with a
    # warning), and then fails the whole deploy on a Fn::GetAtt of one
    # (ScheduleGroup.Arn) and resolves a Ref to one as null (the API stage in
    # the BaseUrl output). The models below create the real objects in
    # moto's backends where it has them, so the deployed stack can be
    # inspected through the service APIs, and stand in for the rest.

    # moto finds models among CloudFormationModel's direct subclasses, so
    # each model below names it beside _Model; its metaclass files models
    # by the moto.<service> module they are defined in.
    MODULE = "moto.cloudformation.relay"

    class _Model:
        """A resource created by CloudFormation: Ref is ref, GetAtt reads attrs."""
        TYPE = ""
        NAME = ""

        def __init__(self, ref, attrs=None):
            self.ref = ref
            self.attrs = attrs or {}

        @property
        def physical_resource_id(self):
            return self.ref

        @classmethod
        def cloudformation_type(cls):
            return cls.TYPE

        @classmethod
        def cloudformation_name_type(cls):
            return cls.NAME

        @classmethod
        def has_cfn_attr(cls, attr):
            return True

        def get_cfn_attribute(self, attr):
            from moto.cloudformation.exceptions import UnformattedGetAttTemplateException
            if attr not in self.attrs:
                raise UnformattedGetAttTemplateException()
            return self.attrs[attr]

        @classmethod
        def update_from_cloudformation_json(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name):
            cls.delete_from_cloudformation_json(original_resource.ref, cloudformation_json, account_id, region_name)
            return cls.create_from_cloudformation_json(new_resource_name, cloudformation_json, account_id, region_name)

        @classmethod
        def delete_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name):
            pass

        def is_created(self):
            return True

    class ScheduleGroup(_Model, CloudFormationModel):
        __module__ = MODULE
        TYPE, NAME = "AWS::Scheduler::ScheduleGroup", "Name"

        @classmethod
        def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
            group = scheduler_backends[account_id][region_name].create_schedule_group(resource_name, tags=[])
            return cls(group.name, {"Arn": group.arn})

        @classmethod
        def delete_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name):
            scheduler_backends[account_id][region_name].schedule_groups.pop(resource_name, None)

    class Schedule(_Model, CloudFormationModel):
        __module__ = MODULE
        TYPE, NAME = "AWS::Scheduler::Schedule", "Name"

        @classmethod
        def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
            p = cloudformation_json["Properties"]
            s = scheduler_backends[account_id][region_name].create_schedule(
                description=p.get("Description"), end_date=p.get("EndDate"),
                flexible_time_window=p["FlexibleTimeWindow"], group_name=p.get("GroupName"),
                kms_key_arn=p.get("KmsKeyArn"), name=resource_name,
                schedule_expression=p["ScheduleExpression"],
                schedule_expression_timezone=p.get("ScheduleExpressionTimezone"),
                start_date=p.get("StartDate"), state=p.get("State", "ENABLED"), target=p["Target"],
                action_after_completion=None,
            )
            return cls(s.name, {"Arn": s.arn})

        @classmethod
        def delete_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name):
            group = cloudformation_json["Properties"].get("GroupName")
            try:
                scheduler_backends[account_id][region_name].delete_schedule(group, resource_name)
            except Exception:
                pass

    class Secret(_Model, CloudFormationModel):
        __module__ = MODULE
        TYPE, NAME = "AWS::SecretsManager::Secret", "Name"

        @classmethod
        def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
            p = cloudformation_json["Properties"]
            value = p.get("SecretString")
            if value is None:
                # GenerateSecretString; the template asks only for no punctuation.
                value = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(32))
            backend = secretsmanager_backends[account_id][region_name]
            backend.create_secret(
                name=resource_name, secret_string=value, secret_binary=None,
                description=p.get("Description"), tags=p.get("Tags"), kms_key_id=p.get("KmsKeyId"),
                client_request_token=None, replica_regions=[], force_overwrite=False,
            )
            arn = backend.secrets[resource_name].arn
            return cls(arn, {"Id": arn})

        @classmethod
        def delete_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name):
            backend = secretsmanager_backends[account_id][region_name]
            name = cloudformation_json["Properties"].get("Name", resource_name)
            backend.secrets.pop(name, None)

    class Alarm(_Model, CloudFormationModel):
        __module__ = MODULE
        TYPE, NAME = "AWS::CloudWatch::Alarm", "AlarmName"

        @classmethod
        def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
            p = cloudformation_json["Properties"]
            a = cloudwatch_backends[account_id][region_name].put_metric_alarm(
                name=resource_name, namespace=p.get("Namespace"), metric_name=p.get("MetricName"),
                comparison_operator=p["ComparisonOperator"], evaluation_periods=p["EvaluationPeriods"],
                period=p.get("Period"), threshold=p.get("Threshold"), statistic=p.get("Statistic"),
                description=p.get("AlarmDescription"), dimensions=p.get("Dimensions", []),
                alarm_actions=p.get("AlarmActions", []), ok_actions=p.get("OKActions", []),
                datapoints_to_alarm=p.get("DatapointsToAlarm"),
                treat_missing_data=p.get("TreatMissingData"),
            )
            return cls(a.name, {"Arn": a.alarm_arn})

        @classmethod
        def delete_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name):
            cloudwatch_backends[account_id][region_name].delete_alarms([resource_name])

    class Stage(_Model, CloudFormationModel):
        __module__ = MODULE
        TYPE = "AWS::ApiGateway::Stage"

        @classmethod
        def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
            p = cloudformation_json["Properties"]
            stage = apigateway_backends[account_id][region_name].create_stage(
                p["RestApiId"], p["StageName"], p["DeploymentId"], variables=p.get("Variables"),
                description=p.get("Description", ""), tracing_enabled=p.get("TracingEnabled"),
            )
            return cls(stage.name)

    class GatewayResponse(_Model, CloudFormationModel):
        __module__ = MODULE
        TYPE = "AWS::ApiGateway::GatewayResponse"

        @classmethod
        def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
            p = cloudformation_json["Properties"]
            apigateway_backends[account_id][region_name].put_gateway_response(
                p["RestApiId"], p["ResponseType"], p.get("StatusCode"),
                p.get("ResponseParameters"), p.get("ResponseTemplates"),
            )
            return cls(resource_name)

    # Policies and the account-wide API Gateway logging role: moto enforces
    # no IAM, so they only have to exist for the stack's references.
    for kind in ("AWS::SQS::QueuePolicy", "AWS::SNS::TopicPolicy", "AWS::S3::BucketPolicy", "AWS::ApiGateway::Account"):
        _models.append(type("Stub", (_Model, CloudFormationModel), {
            "TYPE": kind, "__module__": MODULE,
            "create_from_cloudformation_json": classmethod(lambda cls, name, *a, **kw: cls(name)),
        }))
    # __subclasses__ holds its classes weakly: keep them.
    _models.extend([ScheduleGroup, Schedule, Secret, Alarm, Stage, GatewayResponse])

    from moto.cloudformation import parsing
    parsing.get_model_list.cache_clear()
    parsing.get_model_map.cache_clear()
    parsing.get_name_type_map.cache_clear()


if moto.__version__ == MOTO_VERSION:
    deploy_patches()
else:
    print(f"moto_server.py: moto {moto.__version__}, not {MOTO_VERSION}: CloudFormation is moto's as shipped, "
          "and cdk deploy of the relay stack fails", file=sys.stderr)

if __name__ == "__main__":
    main(sys.argv[1:])
