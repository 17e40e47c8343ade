"""Dict filters become zoom.v1.Filter on the client, without a server: the
same protos protobuf's JSON parser (json_format.ParseDict, which the client
used before) makes of them, numpy scalars and arrays taken where Python's
numbers and lists go, and errors that name where a key is wrong and the
snake_case keys expected there."""

import re

import numpy as np
import pytest
from google.protobuf import json_format

import zoomd
from zoomd import _convert as cv
from zoomd._proto import zoom_pb2


def parse_dict(f):
    return json_format.ParseDict(f, zoom_pb2.Filter())


def request_filter(f):
    """The filter a search sends, and whether it is set at all."""
    req = zoom_pb2.SearchRequest.FromString(
        cv.search_template("c", 10, None, None, None, False, False, False, False, False, f))
    return req.filter, req.HasField("filter")


# Filters ParseDict takes, in every form it takes: snake_case and camelCase
# names, None as a key left out, 64-bit integers as strings, numbers as
# strings, empty messages (set, but empty), zero values of oneof fields.
SAME_AS_PARSE_DICT = [
    {},
    {"must": []},
    {"must": [{"key": "tag", "match": {"value": "a"}}]},
    {"must": [{"key": "a", "match": {"value": v}}
              for v in (7, -7, 0, True, False, 7.0, 7.5, "", 2**53)]},
    {"should": [{"key": "t", "match": {"any": ["a", "b"]}},
                {"key": "t", "match": {"any": [1, -3]}},
                {"key": "t", "match": {"any": []}},
                {"key": "t", "match": {"except": ["x", 1]}}]},
    {"must_not": [{"key": "k", "match": {"keyword": "a"}},
                  {"key": "k", "match": {"keyword": ""}},
                  {"key": "i", "match": {"integer": 0}},
                  {"key": "i", "match": {"integer": 2**63 - 1}},
                  {"key": "i", "match": {"integer": -2**63}},
                  {"key": "i", "match": {"integer": "12"}},
                  {"key": "b", "match": {"boolean": False}},
                  {"key": "b", "match": {"boolean": True}}]},
    {"mustNot": [{"key": "i", "match": {"integers": {"values": [1, -2, 2**62]}}},
                 {"key": "i", "match": {"exceptIntegers": {"values": ["3", 4]}}},
                 {"key": "i", "match": {"integers": {}}}]},
    {"must": [{"key": "p", "range": {"gt": 1, "gte": 0, "lt": 2.5, "lte": -1e300}},
              {"key": "p", "range": {}}, {"key": "p", "range": {"lt": 0}},
              {"key": "p", "range": {"lt": "Infinity", "gt": "-Infinity", "lte": "1.5"}},
              {"key": "p", "valuesCount": {"gte": 2}}, {"key": "p", "values_count": {}}]},
    {"must": [{"key": "g", "geo_radius": {"center": {"lat": 1.5, "lon": -2}, "radius": 100}},
              {"key": "g", "geoRadius": {"center": {"lat": 0, "lon": 0}, "radius": 0}},
              {"key": "g", "geo_bounding_box": {"top_left": {"lat": 10, "lon": 1},
                                                "bottom_right": {"lat": 0, "lon": 5}}},
              {"key": "g", "geoBoundingBox": {"topLeft": {}, "bottomRight": {"lat": 0}}}]},
    {"must": [{"has_id": [1, 2, 2**64 - 1, 0]}, {"hasId": ["5", 6.0]}, {"has_id": []},
              {"is_empty": {"key": "t"}}, {"isEmpty": {}}, {"is_null": {"key": "n"}}]},
    {"must": [{"filter": {}}, {"filter": {"should": [{"key": "a", "match": {"value": 1}}],
                                          "min_should": {"conditions": [{"has_id": [1]}],
                                                         "min_count": 1}}}]},
    {"min_should": {}},
    {"minShould": {"conditions": [], "minCount": 0}},
    {"min_should": {"min_count": 2**64 - 1}},
    {"must": None, "should": [{"key": None, "match": {"value": "a", "any": None}},
                              {"key": "x", "range": None, "match": {"keyword": "k"}}]},
    {"must": [{"key": "a" * 300, "match": {"value": "b" * 1000}},
              {"key": "ü€😀", "match": {"any": ["ü", "😀" * 50]}}]},
    {"must": [{"key": "a", "match": {}}, {}]},
    {"must": [{"has_id": list(range(70000))}]},
]


@pytest.mark.parametrize("f", SAME_AS_PARSE_DICT, ids=range(len(SAME_AS_PARSE_DICT)))
def test_dict_filters_become_what_protobufs_json_parser_makes(f):
    want = parse_dict(f)
    assert cv.to_filter(f) == want
    got, present = request_filter(f)
    assert present and got == want
    count = zoom_pb2.CountRequest()
    cv.fill_filter(f, count.filter)
    assert count.HasField("filter") and count.filter == want


def test_no_filter_and_filter_protos():
    assert cv.to_filter(None) is None
    assert request_filter(None)[1] is False
    proto = parse_dict({"must": [{"has_id": [3]}]})
    assert cv.to_filter(proto) is proto
    assert request_filter(proto)[0] == proto
    with pytest.raises(zoomd.InvalidArgument, match="filter: expected a dict"):
        cv.to_filter("tag=a")


# (with numpy, the same filter in Python's types)
NUMPY = [
    ({"must": [{"key": "cls", "match": {"value": np.int64(7)}}]},
     {"must": [{"key": "cls", "match": {"value": 7}}]}),
    ({"must": [{"key": "cls", "match": {"value": np.uint8(7)}}]},
     {"must": [{"key": "cls", "match": {"value": 7}}]}),
    ({"must": [{"key": "cls", "match": {"value": np.bool_(True)}}]},
     {"must": [{"key": "cls", "match": {"value": True}}]}),
    ({"must": [{"key": "cls", "match": {"value": np.float32(2.0)}}]},
     {"must": [{"key": "cls", "match": {"value": 2.0}}]}),
    ({"must": [{"key": "cls", "match": {"value": np.str_("a")}}]},
     {"must": [{"key": "cls", "match": {"value": "a"}}]}),
    ({"must": [{"has_id": np.arange(5)}]}, {"must": [{"has_id": [0, 1, 2, 3, 4]}]}),
    ({"must": [{"has_id": np.array([2**64 - 1], dtype=np.uint64)}]},
     {"must": [{"has_id": [2**64 - 1]}]}),
    ({"must": [{"has_id": np.array([], dtype=np.int64)}]}, {"must": [{"has_id": []}]}),
    ({"must": [{"has_id": [np.uint64(3), np.int32(4)]}]}, {"must": [{"has_id": [3, 4]}]}),
    ({"must": [{"has_id": (1, 2)}]}, {"must": [{"has_id": [1, 2]}]}),
    ({"must": [{"key": "t", "match": {"any": np.array(["a", "b"])}}]},
     {"must": [{"key": "t", "match": {"any": ["a", "b"]}}]}),
    ({"must": [{"key": "t", "match": {"except": np.array([1, 2], dtype=np.int16)}}]},
     {"must": [{"key": "t", "match": {"except": [1, 2]}}]}),
    ({"must": [{"key": "t", "match": {"integers": {"values": np.array([-1, 2**62])}}}]},
     {"must": [{"key": "t", "match": {"integers": {"values": [-1, 2**62]}}}]}),
    ({"must": [{"key": "t", "match": {"integer": np.int64(-2**63)}}]},
     {"must": [{"key": "t", "match": {"integer": -2**63}}]}),
    ({"must": [{"key": "t", "match": {"boolean": np.bool_(False)}}]},
     {"must": [{"key": "t", "match": {"boolean": False}}]}),
    ({"must": [{"key": "p", "range": {"gte": np.float32(0.5), "lt": np.int64(10)}}]},
     {"must": [{"key": "p", "range": {"gte": 0.5, "lt": 10}}]}),
    ({"must": [{"key": "g", "geo_radius": {"center": zoomd.GeoPoint(lat=np.float64(1), lon=2),
                                           "radius": np.float32(5)}}]},
     {"must": [{"key": "g", "geo_radius": {"center": {"lat": 1, "lon": 2}, "radius": 5}}]}),
    ({"min_should": {"conditions": [{"has_id": np.arange(3)}], "min_count": np.uint8(1)}},
     {"min_should": {"conditions": [{"has_id": [0, 1, 2]}], "min_count": 1}}),
]


@pytest.mark.parametrize("with_numpy,plain", NUMPY, ids=range(len(NUMPY)))
def test_numpy_scalars_and_arrays_in_filters(with_numpy, plain):
    assert cv.to_filter(with_numpy) == parse_dict(plain)
    assert request_filter(with_numpy)[0] == parse_dict(plain)


# Out of range or of the wrong kind, numpy or not: refused on the client.
REFUSED = [
    ({"must": [{"has_id": np.array([3, -1])}]}, r"must\[0\]\.has_id\[1\]: -1 is not a uint64 id"),
    ({"must": [{"has_id": [3, -1]}]}, r"must\[0\]\.has_id\[1\]: -1 is not a uint64 id"),
    ({"must": [{"has_id": [2**64]}]}, r"has_id\[0\]: 18446744073709551616 is not a uint64"),
    ({"must": [{"has_id": np.array([[1, 2]])}]}, r"has_id: expected a list or a 1-d array; "
                                                 r"got an array of shape \(1, 2\)"),
    ({"must": [{"has_id": np.array([True])}]}, r"has_id\[0\]: expected an integer; got bool"),
    ({"must": [{"has_id": 5}]}, r"has_id: expected a list; got int 5"),
    ({"must": [{"key": "t", "match": {"integer": np.uint64(2**63)}}]},
     r"match\.integer: 9223372036854775808 does not fit an int64"),
    ({"must": [{"key": "t", "match": {"integers": {"values": np.array([2**63],
                                                                        dtype=np.uint64)}}}]},
     r"match\.integers\.values\[0\]: 9223372036854775808 does not fit an int64"),
    ({"must": [{"key": "t", "match": {"value": np.int64(2**60)}}]},
     r"match\.value: 1152921504606846976 is beyond 2\^53.*'integer'"),
    ({"must": [{"key": "t", "match": {"value": 2**53 + 1}}]}, r"beyond 2\^53"),
    ({"must": [{"key": "t", "match": {"value": None}}]}, r"match\.value: a match takes a "
                                                         r"string.*is_null"),
    ({"must": [{"key": "t", "match": {"value": [1, 2]}}]}, r"use 'any'"),
    ({"must": [{"key": "t", "match": {"any": [1, None]}}]}, r"match\.any\[1\]: a match takes"),
    ({"must": [{"key": "t", "match": {"any": np.zeros((2, 2))}}]}, r"1-d"),
    ({"must": [{"key": "t", "match": {"boolean": 1}}]}, r"match\.boolean: expected True or False"),
    ({"must": [{"key": "p", "range": {"lt": np.float32("nan")}}]}, r"range\.lt: NaN"),
    ({"must": [{"key": "p", "range": {"lt": True}}]}, r"range\.lt: expected a number"),
    ({"must": [{"key": 5, "range": {"lt": 1}}]}, r"must\[0\]\.key: expected a string; got int"),
    ({"must": [{"key": "\ud800", "range": {"lt": 1}}]}, r"must\[0\]\.key: .*not valid UTF-8"),
    ({"must": [{"key": "t", "match": {"value": 1, "any": [1]}}]},
     r"match: a match takes one of .*; this one sets 'value' and 'any'"),
    ({"must": {"key": "a"}}, r"must: expected a list of conditions; got dict"),
    ({"must": [None]}, r"must\[0\]: expected a condition as a dict"),
    ({"must_not": [], "mustNot": []}, r"both 'must_not' and 'mustNot' given"),
    ({"min_should": {"min_count": -1}}, r"min_should\.min_count: -1 is not a uint64"),
]


@pytest.mark.parametrize("f,message", REFUSED, ids=range(len(REFUSED)))
def test_bad_values_are_refused_on_the_client(f, message):
    with pytest.raises(zoomd.InvalidArgument, match=message) as e:
        cv.to_filter(f)
    assert e.value.client_side
    with pytest.raises(zoomd.InvalidArgument, match=message):
        request_filter(f)


# An unknown key at each level: the keys expected there, in snake_case.
UNKNOWN = [
    ({"mus": []}, "filter: unknown key 'mus' in a filter (did you mean 'must'?); expected one "
                  "of: must, should, must_not, min_should"),
    ({"key": "a", "match": {"value": 1}},
     "filter: unknown key 'key' in a filter (a condition goes in a list: {'must': [{'key': "
     "..., 'match': ...}]}); expected one of: must, should, must_not, min_should"),
    ({"must": [{"key": "cls", "mach": {"value": 1}}]},
     "filter: must[0]: unknown key 'mach' in a condition (did you mean 'match'?); expected one "
     "of: key, match, range, values_count, geo_radius, geo_bounding_box, has_id, is_empty, "
     "is_null, filter"),
    ({"should": [{"has_id": [1]}, {"key": "a", "match": {"vaule": 1}}]},
     "filter: should[1].match: unknown key 'vaule' in a match (did you mean 'value'?); expected "
     "one of: value, any, except, keyword, integer, boolean, integers, except_integers"),
    ({"must": [{"key": "a", "range": {"gte": 1, "below": 3}}]},
     "filter: must[0].range: unknown key 'below' in a range; expected one of: gt, gte, lt, lte"),
    ({"min_should": {"conditons": []}},
     "filter: min_should: unknown key 'conditons' in min_should (did you mean 'conditions'?); "
     "expected one of: conditions, min_count"),
    ({"must": [{"key": "g", "geo_radius": {"center": {"lat": 1, "lng": 2}}}]},
     "filter: must[0].geo_radius.center: unknown key 'lng' in a geo point (did you mean "
     "'lon'?); expected one of: lat, lon"),
    ({"must": [{"is_empty": {"field": "tags"}}]},
     "filter: must[0].is_empty: unknown key 'field' in is_empty; expected one of: key"),
    ({"must": [{"filter": {"must_not": [{"key": "x", "match": {"integers": {"value": [1]}}}]}}]},
     "filter: must[0].filter.must_not[0].match.integers: unknown key 'value' in integers "
     "(did you mean 'values'?); expected one of: values"),
]


@pytest.mark.parametrize("f,message", UNKNOWN, ids=range(len(UNKNOWN)))
def test_unknown_keys_name_the_snake_case_keys(f, message):
    with pytest.raises(zoomd.InvalidArgument) as e:
        cv.to_filter(f)
    assert e.value.client_side
    assert e.value.message == message
    assert not re.search(r"[a-z][A-Z]", e.value.message.split("; expected")[1])  # no camelCase


def test_the_keys_and_tags_are_the_protos():
    """Each level's keys are its message's fields, snake_case and camelCase
    (a field added to the proto fails here until the converter has it), and
    the encoder's tags their numbers."""
    levels = [(cv._FILTER_KEYS, zoom_pb2.Filter), (cv._MIN_SHOULD_KEYS, zoom_pb2.MinShould),
              (cv._CONDITION_KEYS, zoom_pb2.Condition), (cv._MATCH_KEYS, zoom_pb2.Match),
              (cv._INTEGERS_KEYS, zoom_pb2.Integers), (cv._RANGE_KEYS, zoom_pb2.Range),
              (cv._GEO_RADIUS_KEYS, zoom_pb2.GeoRadius),
              (cv._GEO_BOX_KEYS, zoom_pb2.GeoBoundingBox),
              (cv._GEO_POINT_KEYS, zoom_pb2.GeoPoint), (cv._FIELD_KEY_KEYS, zoom_pb2.FieldKey)]
    for keys, message in levels:
        fields = message.DESCRIPTOR.fields
        assert list(dict.fromkeys(keys.values())) == [f.name for f in fields], message
        assert keys == {**{f.name: f.name for f in fields}, **{f.json_name: f.name for f in fields}}
    # The tags the encoder writes: (field number << 3 | wire type).
    tags = [(cv._FILTER_TAGS, zoom_pb2.Filter), (cv._CONDITION_TAGS, zoom_pb2.Condition),
            (cv._MATCH_TAGS, zoom_pb2.Match), (cv._RANGE_TAGS, zoom_pb2.Range),
            (cv._GEO_POINT_TAGS, zoom_pb2.GeoPoint)]
    for table, message in tags:
        for name, tag in table.items():
            field = message.DESCRIPTOR.fields_by_name[name]
            wire = 1 if field.type == field.TYPE_DOUBLE else 2
            assert tag == bytes([field.number << 3 | wire]), (message, name)
